//===- ShardLayout.h - a stage's model state cut into equal shards -*- C++
//-*-===//
//
// ZeRO-style sharding splits a stage's parameters (and with them its
// gradients and optimizer state) over the N data-parallel devices. The
// stage's tensors are concatenated in their order in the plan; the
// concatenation is padded to N equal shards of ceil(total / N) elements, and
// device d owns shard d. The padding sits at the end of the concatenation, so
// only the last shards hold padding; a piece never reaches into it. One
// definition for the compiler (the report's bytes) and the runtime (which
// elements a device updates, gathers and scatters).
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PLAN_SHARDLAYOUT_H
#define CDP_PLAN_SHARDLAYOUT_H

#include <algorithm>
#include <cstdint>
#include <vector>

namespace cdp {

class ShardLayout {
public:
  /// The part of one tensor that lies in a shard.
  struct Piece {
    int tensor;          ///< index into the stage's tensors
    int64_t offset;      ///< first element within the tensor
    int64_t shardOffset; ///< first element within the shard
    int64_t length;
  };

  ShardLayout(std::vector<int64_t> sizes, int devices)
      : sizes(std::move(sizes)), devices(std::max(devices, 1)) {
    for (int64_t size : this->sizes)
      total += size;
    shard = (total + this->devices - 1) / this->devices;
  }

  int64_t totalSize() const { return total; }
  size_t tensors() const { return sizes.size(); }
  /// Elements of every shard, padding included.
  int64_t shardSize() const { return shard; }
  int64_t paddedSize() const { return shard * devices; }
  int64_t padding() const { return paddedSize() - total; }
  /// Real (unpadded) elements of device d's shard.
  int64_t ownedSize(int device) const {
    int64_t begin = std::min(total, device * shard);
    return std::min(total, begin + shard) - begin;
  }

  /// The tensors' parts in device d's shard, in concatenation order.
  std::vector<Piece> pieces(int device) const {
    std::vector<Piece> out;
    int64_t begin = std::min(total, device * shard),
            end = std::min(total, begin + shard), start = 0;
    for (int t = 0; t < static_cast<int>(sizes.size()); ++t) {
      int64_t stop = start + sizes[t];
      int64_t from = std::max(begin, start), to = std::min(end, stop);
      if (from < to)
        out.push_back({t, from - start, from - begin, to - from});
      start = stop;
    }
    return out;
  }

private:
  std::vector<int64_t> sizes;
  int devices;
  int64_t total = 0, shard = 0;
};

} // namespace cdp

#endif // CDP_PLAN_SHARDLAYOUT_H
