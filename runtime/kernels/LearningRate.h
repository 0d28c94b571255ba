//===- LearningRate.h - the update instruction's hyper-parameters -*- C++
//-*-===//
//
// What every backend's `update` kernel reads from its instruction: the
// optimizer, its constants and the learning-rate schedule, evaluated on the
// host once per update as PyTorch's schedulers do (in double).
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_KERNELS_LEARNINGRATE_H
#define CDP_RUNTIME_KERNELS_LEARNINGRATE_H

#include "cdp/Runtime/Kernel.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace cdp::runtime {

struct UpdateRule {
  explicit UpdateRule(const KernelArgs &args)
      : adam(args.s("optimizer", "sgd") == "adam" ||
             args.s("optimizer", "sgd") == "adamw"),
        decoupled(args.s("optimizer", "sgd") == "adamw"),
        lr(static_cast<float>(args.f("lr", 0.01))),
        momentum(static_cast<float>(args.f("momentum", 0.0))),
        weightDecay(static_cast<float>(args.f("weight_decay", 0.0))),
        beta1(static_cast<float>(args.f("beta1", 0.9))),
        beta2(static_cast<float>(args.f("beta2", 0.999))),
        epsilon(static_cast<float>(args.f("epsilon", 1e-8))),
        schedule(args.s("lr_schedule", "constant")),
        period(std::max<int64_t>(args.i("lr_period", 1), 1)),
        gamma(args.f("lr_gamma", 0.1)), lrMin(args.f("lr_min", 0.0)),
        startFactor(args.f("lr_start", 1.0)), endFactor(args.f("lr_end", 1.0)),
        warmup(std::max<int64_t>(args.i("lr_warmup", 0), 0)),
        warmupStart(args.f("lr_warmup_start", 1.0)) {
    // An optimizer the kernels do not know would silently run as SGD.
    std::string optimizer = args.s("optimizer", "sgd");
    if (optimizer != "sgd" && optimizer != "momentum" && optimizer != "adam" &&
        optimizer != "adamw")
      args.fail("optimizer '" + optimizer +
                "' is not one cdp runs (sgd, momentum, adam, adamw)");
    if (schedule != "constant" && schedule != "step" && schedule != "cosine" &&
        schedule != "linear")
      args.fail("learning-rate schedule '" + schedule +
                "' is not one cdp runs (constant, step, cosine, linear)");
  }

  /// The learning rate of the k-th update (k from 0).
  float scheduledLr(int64_t k) const {
    double base = lr;
    if (k < warmup)
      return static_cast<float>(
          base * (warmupStart + (1.0 - warmupStart) * static_cast<double>(k) /
                                    static_cast<double>(warmup)));
    k -= warmup; // the schedule starts after the warmup (SequentialLR)
    if (schedule == "linear")
      return static_cast<float>(
          base * (startFactor + (endFactor - startFactor) *
                                    static_cast<double>(std::min(k, period)) /
                                    static_cast<double>(period)));
    if (schedule == "step")
      return static_cast<float>(
          base * std::pow(gamma, static_cast<double>(k / period)));
    if (schedule == "cosine")
      return static_cast<float>(
          lrMin + (base - lrMin) *
                      (1.0 + std::cos(M_PI * static_cast<double>(k) /
                                      static_cast<double>(period))) /
                      2.0);
    return lr;
  }

  /// Whether the rule keeps a first (momentum, exp_avg) and a second
  /// (exp_avg_sq) moment per parameter.
  bool hasFirst() const { return adam || momentum != 0.0f; }
  bool hasSecond() const { return adam; }

  /// Whether `other` updates as this rule does but for its weight decay
  /// (--no-decay's tensors): one multi-tensor update can run both.
  bool sameButWeightDecay(const UpdateRule &other) const {
    return adam == other.adam && decoupled == other.decoupled &&
           lr == other.lr && momentum == other.momentum &&
           beta1 == other.beta1 && beta2 == other.beta2 &&
           epsilon == other.epsilon && schedule == other.schedule &&
           period == other.period && gamma == other.gamma &&
           lrMin == other.lrMin && startFactor == other.startFactor &&
           endFactor == other.endFactor && warmup == other.warmup &&
           warmupStart == other.warmupStart;
  }

  bool adam, decoupled;
  float lr, momentum, weightDecay, beta1, beta2, epsilon;
  std::string schedule;
  int64_t period;
  double gamma, lrMin, startFactor, endFactor;
  int64_t warmup;
  double warmupStart;
};

} // namespace cdp::runtime

#endif // CDP_RUNTIME_KERNELS_LEARNINGRATE_H
