// Whether operations record themselves on the tape. Per thread; on by default.
#pragma once

namespace triad {

class GradMode {
 public:
  static bool enabled();
  static void set_enabled(bool enabled);
};

// Scope in which no operation is recorded (evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Scope in which recording is on again (recomputation inside a backward pass).
class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(GradMode::enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace triad
