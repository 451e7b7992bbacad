// Aligned text tables for human output: left-aligned text, right-aligned
// numbers, columns as wide as their widest cell.
#pragma once

#include <string>
#include <vector>

namespace trainsnap::cli {

enum class Align { kLeft, kRight };

struct Column {
  std::string header;
  Align align = Align::kLeft;
};

class Table {
 public:
  explicit Table(std::vector<Column> columns);
  // Missing trailing cells render empty; extra cells are a programming error
  // and are dropped.
  void AddRow(std::vector<std::string> cells);
  // A line of dashes across the table (before totals, for instance).
  void AddSeparator();
  bool empty() const { return rows_.empty(); }
  // Header, a dashed rule, then the rows; every line ends with '\n'. Two
  // spaces between columns; no trailing spaces.
  std::string Render() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;  // an empty row = separator
};

// Width of `text` in terminal columns (UTF-8 code points).
size_t DisplayWidth(const std::string& text);

}  // namespace trainsnap::cli
