// Data-parallel gradient sum: the trainable parameters packed in buckets, each bucket summed over
// the ranks in rank order as soon as backward has completed its gradients; optionally with the
// optimizer sharded (ZeRO stage 1), each rank updating its piece of every bucket.
#pragma once
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "autograd/node.h"
#include "train/adamw.h"
#include "train/distributed.h"

namespace glm4 {

class GradientReducer {
 public:
  // `params` in the optimizer's order. Buckets hold whole parameters, last parameter first (the
  // order backward completes them), at most `bucket_bytes` each unless one parameter is larger.
  // Each bucket is cut into one contiguous piece per rank.
  GradientReducer(Distributed& group, std::vector<Tensor> params, bool shard_optimizer,
                  int64_t bucket_bytes);

  Distributed& group() { return group_; }
  bool sharded() const { return sharded_; }
  // The elements of each parameter that `rank`'s optimizer updates: all of them, or when sharded
  // the rank's pieces (AdamW's `owned`).
  const std::vector<ElementRange>& owned(int rank) const { return owned_.at(size_t(rank)); }

  // Around the step's last backward pass on this rank: begin() starts summing each bucket as soon
  // as its gradients are complete; finish() starts the rest, waits, and leaves in every gradient
  // the sum over all ranks, in rank order (when sharded, only in the owned elements). A parameter
  // without a gradient on any rank keeps none. begin() may be skipped (no local batch).
  void begin();
  void finish();

  // The global gradient norm before clipping; clips like clip_grad_norm when max_norm > 0.
  double clip(double max_norm);
  // Sharded: after the optimizer step, every rank gets every rank's updated pieces.
  void gather_params();
  // Rank 0 gets parameter i's full AdamW moments in `m` and `v`; every rank must call it, in the
  // same order.
  void gather_moments(const AdamW& optimizer, size_t i, std::vector<float>* m,
                      std::vector<float>* v);

  int64_t buckets() const { return int64_t(buckets_.size()); }
  int64_t bytes_sent_per_step() const;  // gradient and parameter payload this rank sends
  double wait_seconds() const {
    return wait_seconds_;
  }  // in finish(), clip(), gather_params() this step

 private:
  struct Slot {
    size_t param;
    int64_t offset, numel;  // in the bucket
  };
  enum class Stage { kWaiting, kExchanging, kGathering, kDone };
  struct Bucket {
    std::vector<Slot> slots;
    int64_t numel = 0;
    std::vector<int64_t> counts;  // piece length per rank
    std::vector<int64_t> starts;  // piece start per rank
    int64_t waiting = 0;          // parameters not yet complete in this pass
    Stage stage = Stage::kDone;
    std::vector<float> send, recv;
    Distributed::Request request = 0;
  };

  void on_ready(const TensorImpl* leaf);
  void mark_ready(size_t param);
  void post_ready_buckets();
  void advance(Bucket& b, bool block);
  void progress(bool block);
  void reduce_pieces(Bucket& b);
  void unpack(const Bucket& b, const float* from, int64_t begin, int64_t end);
  Tensor grad_of(size_t param);

  Distributed& group_;
  std::vector<Tensor> params_;
  bool sharded_;
  int64_t bucket_floats_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<std::vector<ElementRange>> owned_;  // [rank][parameter]
  std::unordered_map<const TensorImpl*, size_t> index_of_;
  std::vector<char> ready_, had_grad_;
  size_t next_to_post_ = 0;
  bool begun_ = false;
  std::unique_ptr<LeafReadyHook> hook_;
  double wait_seconds_ = 0;
};

}  // namespace glm4
