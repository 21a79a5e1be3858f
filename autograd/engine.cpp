// The backward engine: topological order over the recorded nodes, gradient accumulation,
// and accumulation into leaves.
#include <unordered_map>
#include <unordered_set>

#include "autograd/node.h"
#include "autograd/saved_bf16.h"
#include "autograd/tensor_math.h"
#include "base/check.h"

namespace glm4 {

namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_saw_trainable = false;
thread_local const LeafReadyHook::Fn* t_leaf_ready = nullptr;

Edge edge_of(const Tensor& t) {
  Edge e;
  if (!t.defined() || !t.requires_grad()) return e;
  if (t.grad_fn())
    e.node = t.grad_fn();
  else
    e.leaf = t.impl_ptr();
  return e;
}

// A gradient being summed for one node. `owned` says the engine made its storage for this sum
// alone, so further terms may be added in place; otherwise it may alias a gradient another op
// handed on (add's backward gives one tensor to both inputs) and is copied before it changes.
struct GradSum {
  Tensor value;
  bool owned = false;
};

// dst += g.
void accumulate(GradSum& dst, const Tensor& g, const char* where) {
  if (!dst.value.defined()) {
    dst.value = g;
    return;
  }
  GLM4_CHECK(dst.value.shape() == g.shape(), "[backward] gradient of ", shape_str(g.shape()),
             " for a tensor of ", shape_str(dst.value.shape()), " from ", where);
  if (dst.owned) {
    add_into(dst.value, g);
  } else {
    dst.value = add_values(dst.value, g);
    dst.owned = true;
  }
}

// target[rows[i]] += g[i] for the rows of a node with grad_rows (distinct, so rows in parallel).
void add_rows_into(Tensor& target, const Tensor& g, const Node& from) {
  GLM4_CHECK(g.rank() == 2 && g.dim(0) == int64_t(from.grad_rows.size()) && target.rank() == 2 &&
                 target.dim(0) == from.grad_row_count && target.dim(1) == g.dim(1),
             "[backward] ", from.op, " gave a gradient of ", shape_str(g.shape()), " for ",
             from.grad_rows.size(), " rows of a tensor of ", shape_str(target.shape()));
  add_rows(target, g, from.grad_rows);
}

void accumulate_rows(GradSum& dst, const Tensor& g, const Node& from) {
  if (!dst.value.defined()) {
    dst.value = Tensor::zeros({from.grad_row_count, g.rank() == 2 ? g.dim(1) : int64_t{0}});
    dst.owned = true;
  } else if (!dst.owned) {
    dst.value = dst.value.clone();
    dst.owned = true;
  }
  add_rows_into(dst.value, g, from);
}

void accumulate_into_leaf(TensorImpl& leaf, const Tensor& g, const char* where) {
  GLM4_CHECK(leaf.shape == g.shape(), "[backward] gradient of ", shape_str(g.shape()),
             " for a leaf of ", shape_str(leaf.shape), " from ", where);
  if (!leaf.grad) {
    leaf.grad = g.clone().impl_ptr();
    return;
  }
  add_into(Tensor(leaf.grad), g);
}

void accumulate_rows_into_leaf(TensorImpl& leaf, const Tensor& g, const Node& from) {
  if (!leaf.grad) leaf.grad = Tensor::zeros(leaf.shape).impl_ptr();
  Tensor target(leaf.grad);
  add_rows_into(target, g, from);
}
}  // namespace

bool GradMode::enabled() { return t_grad_enabled; }
void GradMode::set_enabled(bool on) { t_grad_enabled = on; }
bool& saw_trainable_in_no_grad() { return t_saw_trainable; }

LeafReadyHook::LeafReadyHook(Fn fn) : fn_(std::move(fn)), prev_(t_leaf_ready) {
  t_leaf_ready = &fn_;
}
LeafReadyHook::~LeafReadyHook() { t_leaf_ready = prev_; }
const LeafReadyHook::Fn* LeafReadyHook::current() { return t_leaf_ready; }

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Tensor record(Tensor out, const char* op, const std::vector<Tensor>& inputs,
              std::vector<Tensor> saved, Node::Backward backward) {
  if (!any_requires_grad(inputs)) return out;
  if (!GradMode::enabled()) {
    t_saw_trainable = true;
    return out;
  }
  auto node = std::make_shared<Node>();
  node->op = op;
  node->inputs.reserve(inputs.size());
  for (const Tensor& t : inputs) node->inputs.push_back(edge_of(t));
  node->saved = std::move(saved);
  node->backward = std::move(backward);
  TensorImpl* impl = out.impl();
  impl->requires_grad = true;
  impl->grad_fn = std::move(node);
  return out;
}

Tensor record(Tensor out, const char* op, const std::vector<Tensor>& inputs,
              std::vector<Tensor> saved, std::initializer_list<size_t> bf16_slots,
              Node::Backward backward) {
  out = record(std::move(out), op, inputs, std::move(saved), std::move(backward));
  if (const std::shared_ptr<Node>& node = out.grad_fn())
    for (size_t i : bf16_slots) SavedInBf16::offer(node->saved[i]);
  return out;
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads) {
  GLM4_CHECK(grads.empty() || grads.size() == roots.size(), "[backward] ", roots.size(),
             " roots but ", grads.size(), " seed gradients");
  NoGradGuard no_grad;  // backward formulas are not themselves recorded

  // Topological order (iterative DFS; children before parents in `order`).
  std::vector<Node*> order;
  std::unordered_set<Node*> seen;
  std::vector<std::pair<Node*, size_t>> stack;
  for (const Tensor& r : roots) {
    Node* n = r.defined() ? r.grad_fn().get() : nullptr;
    if (n && seen.insert(n).second) stack.push_back({n, 0});
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < node->inputs.size()) {
        Node* child = node->inputs[next++].node.get();
        if (!child) continue;
        if (seen.insert(child).second) stack.push_back({child, 0});
      } else {
        order.push_back(node);
        stack.pop_back();
      }
    }
  }

  // With a leaf-ready hook: edges into each leaf still to deliver in this pass.
  const LeafReadyHook::Fn* leaf_ready = t_leaf_ready;
  std::unordered_map<const TensorImpl*, int64_t> pending;
  if (leaf_ready)
    for (Node* node : order)
      for (const Edge& e : node->inputs)
        if (e.leaf) ++pending[e.leaf.get()];

  std::unordered_map<Node*, GradSum> grad_of;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    if (!r.defined() || !r.requires_grad()) continue;
    Tensor seed = i < grads.size() ? grads[i] : Tensor();
    if (!seed.defined()) {
      GLM4_CHECK(r.numel() == 1, "[backward] a seed gradient is needed for a root of shape ",
                 shape_str(r.shape()));
      seed = Tensor::full(r.shape(), 1.0f);
    }
    GLM4_CHECK(seed.shape() == r.shape(), "[backward] seed of ", shape_str(seed.shape()),
               " for a root of ", shape_str(r.shape()));
    if (r.grad_fn())
      accumulate(grad_of[r.grad_fn().get()], seed, "seed");
    else
      accumulate_into_leaf(*r.impl(), seed, "seed");
  }

  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* node = *it;
    auto found = grad_of.find(node);
    if (found != grad_of.end()) {
      GLM4_CHECK(node->backward, "[backward] the graph through op ", node->op,
                 " was already freed by an earlier backward pass");
      Tensor g = std::move(found->second.value);
      grad_of.erase(found);
      std::vector<Tensor> input_grads = node->backward(*node, g);
      GLM4_CHECK(input_grads.size() == node->inputs.size(), "[backward] op ", node->op,
                 " returned ", input_grads.size(), " gradients for ", node->inputs.size(),
                 " inputs");
      for (size_t i = 0; i < node->inputs.size(); ++i) {
        const Edge& e = node->inputs[i];
        if (!e.active() || !input_grads[i].defined()) continue;
        // A gradient of a few rows (Node::grad_rows)?
        const bool rows = node->grad_row_count > 0 && i == node->grad_rows_input;
        if (e.node && rows)
          accumulate_rows(grad_of[e.node.get()], input_grads[i], *node);
        else if (e.node)
          accumulate(grad_of[e.node.get()], input_grads[i], node->op);
        else if (rows)
          accumulate_rows_into_leaf(*e.leaf, input_grads[i], *node);
        else
          accumulate_into_leaf(*e.leaf, input_grads[i], node->op);
      }
    }
    node->release();
    if (leaf_ready)
      for (const Edge& e : node->inputs)
        if (e.leaf && --pending[e.leaf.get()] == 0) (*leaf_ready)(e.leaf.get());
  }
}

}  // namespace glm4
