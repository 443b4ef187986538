// PLACEHOLDER until the checkpoint issue lands (the io room replaces this file).
#include <span>
#include <string>

#include "mxmoe/checkpoint.hpp"
#include "mxmoe/npy.hpp"

namespace mxmoe {

struct Checkpoint::Impl {};
Checkpoint::Checkpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Checkpoint::~Checkpoint() = default;
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;
Checkpoint Checkpoint::open(const std::string& dir) {
  throw LoadError("checkpoint loading is not built yet: " + dir);
}
int Checkpoint::num_layers() const noexcept { return 0; }
LayerSpec Checkpoint::layer_spec(int) const { throw LoadError("not built yet"); }
LayerWeights Checkpoint::layer_weights(int) const { throw LoadError("not built yet"); }

NpyArray read_npy(const std::string& path, bool) { throw LoadError("npy not built yet: " + path); }
void write_npy(const std::string& path, std::span<const float>, std::span<const std::int64_t>) {
  throw LoadError("npy not built yet: " + path);
}

}  // namespace mxmoe
