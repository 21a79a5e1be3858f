// The backward engine: topological order over the recorded nodes, gradient accumulation,
// and accumulation into leaves.
#include <unordered_map>
#include <unordered_set>

#include "autograd/node.h"
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

// dst += g, without writing into g's storage (gradients may alias each other).
void accumulate(Tensor& dst, const Tensor& g, const char* where) {
  if (!dst.defined()) {
    dst = g;
    return;
  }
  GLM4_CHECK(dst.shape() == g.shape(), "[backward] gradient of ", shape_str(g.shape()),
             " for a tensor of ", shape_str(dst.shape()), " from ", where);
  dst = add_values(dst, g);
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

  std::unordered_map<Node*, Tensor> grad_of;
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
      Tensor g = std::move(found->second);
      grad_of.erase(found);
      std::vector<Tensor> input_grads = node->backward(*node, g);
      GLM4_CHECK(input_grads.size() == node->inputs.size(), "[backward] op ", node->op,
                 " returned ", input_grads.size(), " gradients for ", node->inputs.size(),
                 " inputs");
      for (size_t i = 0; i < node->inputs.size(); ++i) {
        const Edge& e = node->inputs[i];
        if (!e.active() || !input_grads[i].defined()) continue;
        if (e.node)
          accumulate(grad_of[e.node.get()], input_grads[i], node->op);
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
