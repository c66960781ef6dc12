// For the tests that run the tool binaries: a run whose stdout is read as one JSON document.
#pragma once

#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.hpp"

namespace ckpt_test {

struct ToolRun : ProgramRun {
  ToolRun() = default;
  explicit ToolRun(ProgramRun run) : ProgramRun(std::move(run)) {}
  // Fails the test, showing both streams, when stdout is not one JSON document.
  [[nodiscard]] nlohmann::json out_json() const {
    INFO("stdout: " << out << "\nstderr: " << err);
    nlohmann::json j;
    REQUIRE_NOTHROW(j = nlohmann::json::parse(out));
    return j;
  }
};

[[nodiscard]] inline ToolRun run_tool(const std::string& program, const std::vector<std::string>& args) {
  return ToolRun(run_program(program, args));
}

}  // namespace ckpt_test
