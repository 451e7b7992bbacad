// Validators for the tool's integer arguments (steps and counts). CLI11's own
// conversion (strtoll with base 0) reads "010" as octal 8, "0x10" as hex,
// skips leading blanks and accepts "+5"; an overflowing value clamps. These
// validators run on the argument's text before that conversion, so that only
// canonical decimal reaches it: anything else is a usage error (exit 2),
// raised while parsing, before any store is opened.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

namespace trainsnap::cli {

// The value of `text` when it is canonical decimal in [min, max]: an optional
// '-' then "0" or a digit 1-9 followed by digits; no blanks, no '+', no
// leading zeros, no "-0". nullopt otherwise (also on overflow).
std::optional<int64_t> ParseDecimal(std::string_view text, int64_t min, int64_t max);

// A snapshot step: any int64 written in canonical decimal (a negative step
// must follow `--` on the command line, as CLI11 reads "-5" as an option).
CLI::Validator StepValidator();
// A count >= `min` in canonical decimal.
CLI::Validator CountValidator(int64_t min);

}  // namespace trainsnap::cli
