#include "cli/arguments.h"

#include <limits>

namespace trainsnap::cli {

std::optional<int64_t> ParseDecimal(std::string_view text, int64_t min, int64_t max) {
  bool negative = !text.empty() && text.front() == '-';
  std::string_view digits = negative ? text.substr(1) : text;
  if (digits.empty()) return std::nullopt;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  if (digits.size() > 1 && digits.front() == '0') return std::nullopt;  // "010" is not 8, nor 10
  if (negative && digits == "0") return std::nullopt;
  // Accumulate towards the sign so that INT64_MIN parses without overflow.
  int64_t value = 0;
  for (char c : digits) {
    const int d = c - '0';
    if (negative) {
      if (value < (std::numeric_limits<int64_t>::min() + d) / 10) return std::nullopt;
      value = value * 10 - d;
    } else {
      if (value > (std::numeric_limits<int64_t>::max() - d) / 10) return std::nullopt;
      value = value * 10 + d;
    }
  }
  if (value < min || value > max) return std::nullopt;
  return value;
}

namespace {

std::string Quoted(const std::string& text) { return "`" + text + "`"; }

}  // namespace

CLI::Validator StepValidator() {
  CLI::Validator v(
      [](std::string& text) -> std::string {
        if (ParseDecimal(text, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) return {};
        return Quoted(text) + " is not a step: write a plain decimal integer in the int64 range "
               "(no '+', blanks, leading zeros, 0x or exponent; a negative step after `--`)";
      },
      "STEP", "step");
  return v;
}

CLI::Validator CountValidator(int64_t min) {
  CLI::Validator v(
      [min](std::string& text) -> std::string {
        if (ParseDecimal(text, min, std::numeric_limits<int64_t>::max())) return {};
        return Quoted(text) + " is not a count: write a plain decimal integer >= " + std::to_string(min) +
               " in the int64 range (no sign, blanks or leading zeros)";
      },
      "INT>=" + std::to_string(min), "count");
  return v;
}

}  // namespace trainsnap::cli
