// What a cnnbench::Error says, for the tests that check an error's wording.
#pragma once

#include <string>

#include "cnnbench/core.hpp"

namespace cnnbench::test {

// e.what() of the Error that action() throws; empty when it throws none.
template <class Action>
std::string error_of(Action&& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace cnnbench::test
