// A way to stop LayerStorage::random part way, for a writer of checkpoints cancelled by Ctrl-C
// (generate): the weights of one large layer take seconds to make, too long to wait for a
// signal to be noticed. While a GenerationPoll lives on a thread, the layers made on that
// thread call its function between pieces of their weights (every 8 MB); an exception it
// throws leaves LayerStorage::random, which frees what it made.
#pragma once

#include <functional>

namespace mxmoe::model {

class GenerationPoll {
 public:
  explicit GenerationPoll(std::function<void()> poll);
  ~GenerationPoll();
  GenerationPoll(const GenerationPoll&) = delete;
  GenerationPoll& operator=(const GenerationPoll&) = delete;
  // Calls the innermost GenerationPoll's function of this thread; nothing when there is none.
  static void poll();

 private:
  std::function<void()> poll_;
  const GenerationPoll* outer_;
};

}  // namespace mxmoe::model
