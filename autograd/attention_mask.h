// Which keys each query row of attention may see: always one contiguous range of key indices,
// so kernels skip masked tiles and never build a [T, S] mask.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace glm4 {

struct AttentionMask {
  bool causal = true;
  int64_t q_offset = 0;            // query t sits at key index t + q_offset (decode: cached length)
  std::vector<int32_t> kv_begin;   // [B] first valid key (left padding); empty: 0
  std::vector<int32_t> kv_end;     // [B] one past the last valid key (right padding); empty: S
  std::vector<int32_t> seg_start;  // [B, S] first key index of the packed example holding each
                                   // key index; empty: no packing
  // A query in the right padding sees its row's valid keys, as transformers' masks let it
  // (glm4_moe routes padding too, so its padding must be what transformers computes); false:
  // it sees nothing and gives 0.
  bool padding_queries_attend = false;

  // Visible keys of query t in batch row b are [lo, hi); empty when lo >= hi (a padding row).
  void range(int64_t b, int64_t t, int64_t S, int64_t* lo, int64_t* hi) const {
    int64_t begin = kv_begin.empty() ? 0 : kv_begin[b];
    int64_t end = kv_end.empty() ? S : kv_end[b];
    int64_t p = t + q_offset;
    int64_t l = begin, h = end;
    if (causal) {
      h = std::min<int64_t>(h, p + 1);
      if (p < begin || (p >= end && !padding_queries_attend)) h = l;  // the query itself is padding
    }
    if (!seg_start.empty() && p >= 0 && p < S) l = std::max<int64_t>(l, seg_start[b * S + p]);
    *lo = l;
    *hi = std::max(l, h);
  }
};

}  // namespace glm4
