#include "cli/confirm.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <iostream>

namespace trainsnap::cli {

Status CanConfirm(bool assume_yes) {
  if (assume_yes || isatty(STDIN_FILENO) == 1) return Status::OK();
  return Status::InvalidArgument("confirmation required but stdin is not a terminal; pass --yes");
}

Status Confirm(const std::string& question, bool assume_yes) {
  if (assume_yes) return Status::OK();
  TRAINSNAP_RETURN_IF_ERROR(CanConfirm(assume_yes));
  std::fprintf(stderr, "%s [y/N] ", question.c_str());
  std::fflush(stderr);
  std::string answer;
  if (!std::getline(std::cin, answer)) answer.clear();
  std::transform(answer.begin(), answer.end(), answer.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (answer == "y" || answer == "yes") return Status::OK();
  return Status::Aborted("cancelled; nothing was changed");
}

}  // namespace trainsnap::cli
