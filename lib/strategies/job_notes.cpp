// What a rank knows of its run when the job must end because another rank is lost: whether the
// process was asked to stop, and the last checkpoint. run_training keeps them current on every
// rank (the primary writes the checkpoint; every rank knows when it is due), so that whichever
// live rank speaks for the job can say where the run can resume from.
#include <mutex>
#include <utility>

#include "rank_group.hpp"

namespace cnnbench {

namespace {

struct JobNotes {
  std::mutex mutex;
  std::function<bool()> stop_requested;
  std::string checkpoint;  // "PATH (step S)", or empty
};

JobNotes& notes() {
  static JobNotes instance;
  return instance;
}

}  // namespace

JobNotesScope::JobNotesScope(std::function<bool()> stop_requested) {
  const std::lock_guard lock(notes().mutex);
  notes().stop_requested = std::move(stop_requested);
  notes().checkpoint.clear();
}

JobNotesScope::~JobNotesScope() {
  const std::lock_guard lock(notes().mutex);
  notes().stop_requested = nullptr;
  notes().checkpoint.clear();
}

bool job_stop_requested() {
  const std::lock_guard lock(notes().mutex);
  return notes().stop_requested && notes().stop_requested();
}

void note_checkpoint(const std::string& file, std::int64_t step) {
  const std::lock_guard lock(notes().mutex);
  notes().checkpoint = file + " (step " + std::to_string(step) + ")";
}

std::string last_checkpoint_text() {
  const std::lock_guard lock(notes().mutex);
  if (notes().checkpoint.empty()) return "no checkpoint was written";
  return "the last checkpoint is " + notes().checkpoint;
}

}  // namespace cnnbench
