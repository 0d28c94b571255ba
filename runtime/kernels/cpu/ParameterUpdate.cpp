//===- ParameterUpdate.cpp - optimizer steps over element ranges ----------===//

#include "ParameterUpdate.h"

#include <cmath>

namespace cdp::runtime::cpu {

void applyUpdate(const UpdateRule &rule, int64_t count, float rate, float *p,
                 const float *g, float *first, float *second, int64_t n) {
  const float beta1 = rule.beta1, beta2 = rule.beta2,
              weightDecay = rule.weightDecay, momentum = rule.momentum,
              epsilon = rule.epsilon;
  if (rule.adam) {
    float correction1 = 1.0f - std::pow(beta1, static_cast<float>(count));
    float correction2 = 1.0f - std::pow(beta2, static_cast<float>(count));
    float stepSize = rate / correction1;
    float root2 = std::sqrt(correction2);
    float shrink = 1.0f - rate * weightDecay;
    for (int64_t i = 0; i < n; ++i) {
      float d = g[i];
      if (rule.decoupled)
        p[i] *= shrink;
      else
        d += weightDecay * p[i];
      first[i] = beta1 * first[i] + (1.0f - beta1) * d;
      second[i] = beta2 * second[i] + (1.0f - beta2) * d * d;
      p[i] -= stepSize * first[i] / (std::sqrt(second[i]) / root2 + epsilon);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    float d = g[i] + weightDecay * p[i];
    if (momentum != 0.0f) {
      first[i] = count == 1 ? d : momentum * first[i] + d;
      d = first[i];
    }
    p[i] -= rate * d;
  }
}

ShardedUpdate::ShardedUpdate(std::vector<UpdateRule> rules,
                             const ShardLayout &layout, int device)
    : rules(std::move(rules)), pieces(layout.pieces(device)) {
  if (!this->rules.empty() && this->rules.front().hasFirst())
    first.assign(layout.shardSize(), 0.0f);
  if (!this->rules.empty() && this->rules.front().hasSecond())
    second.assign(layout.shardSize(), 0.0f);
}

template <typename ParamOf, typename GradOf>
void ShardedUpdate::update(const ParamOf &paramOf, const GradOf &gradOf) {
  int64_t scheduleStep = scheduleApart ? scheduled++ : steps;
  ++steps;
  for (const ShardLayout::Piece &piece : pieces) {
    const UpdateRule &rule = rules[piece.tensor];
    float *m1 = first.empty() ? nullptr : first.data() + piece.shardOffset;
    float *m2 = second.empty() ? nullptr : second.data() + piece.shardOffset;
    applyUpdate(rule, steps, rule.scheduledLr(scheduleStep), paramOf(piece),
                gradOf(piece), m1, m2, piece.length);
  }
}

namespace {
/// Where a piece lies in whole tensors, and in the shard.
template <typename T> auto inTensors(const std::vector<T *> &tensors) {
  return [&tensors](const ShardLayout::Piece &piece) {
    return tensors[piece.tensor] + piece.offset;
  };
}
template <typename T> auto inShard(T *shard) {
  return [shard](const ShardLayout::Piece &piece) {
    return shard + piece.shardOffset;
  };
}
} // namespace

void ShardedUpdate::run(const std::vector<float *> &params,
                        const std::vector<const float *> &grads) {
  update(inTensors(params), inTensors(grads));
}

void ShardedUpdate::runOnShard(const std::vector<float *> &params,
                               const float *shardGrads) {
  update(inTensors(params), inShard(shardGrads));
}

void ShardedUpdate::runOnShard(float *shardParams, const float *shardGrads) {
  update(inShard(shardParams), inShard(shardGrads));
}

} // namespace cdp::runtime::cpu
