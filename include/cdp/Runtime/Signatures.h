//===- Signatures.h - what each op's kernels may read and write -*- C++ -*-===//
//
// A plan is data anyone can rewrite (its checksum is not a signature), and a
// kernel trusts the shapes it is bound to: it loops over one tensor's
// elements and indexes another. Before any kernel is made, the executor
// checks every instruction against its op's signature: how many inputs and
// outputs, their types, and the shape relations each kernel's loops rely on
// (a unary op's output has its input's shape, a gemm's operands agree on
// k, a convolution's output has the size its window, padding and stride
// give, ...), with the attributes those relations read. What passes cannot
// make a kernel of any backend reach outside its tensors.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_RUNTIME_SIGNATURES_H
#define CDP_RUNTIME_SIGNATURES_H

#include "cdp/Runtime/Kernel.h"

#include <string>
#include <vector>

namespace cdp::runtime {

/// Throws a RuntimeError naming the instruction when its tensors or
/// attributes do not fit its op, or when the op has no signature.
void checkSignature(const KernelArgs &args);

/// The ops that have a signature.
std::vector<std::string> signedOps();

} // namespace cdp::runtime

#endif // CDP_RUNTIME_SIGNATURES_H
