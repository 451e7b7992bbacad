#include "cli/table.h"

#include <algorithm>

namespace trainsnap::cli {

size_t DisplayWidth(const std::string& text) {
  size_t width = 0;
  for (unsigned char c : text) {
    if ((c & 0xC0) != 0x80) ++width;  // count lead bytes, skip continuations
  }
  return width;
}

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  if (cells.empty()) return;  // a table without columns: an empty row would be a separator
  rows_.push_back(std::move(cells));
}

void Table::AddSeparator() { rows_.emplace_back(); }

std::string Table::Render() const {
  std::vector<size_t> widths(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) widths[c] = DisplayWidth(columns_[c].header);
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], DisplayWidth(row[c]));
  }
  size_t total = 0;
  for (size_t c = 0; c < widths.size(); ++c) total += widths[c] + (c > 0 ? 2 : 0);

  auto render_row = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < columns_.size(); ++c) {
      if (c > 0) line += "  ";
      size_t pad = widths[c] - DisplayWidth(cells[c]);
      if (columns_[c].align == Align::kRight) {
        line.append(pad, ' ');
        line += cells[c];
      } else {
        line += cells[c];
        line.append(pad, ' ');
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    return line + "\n";
  };

  std::vector<std::string> header;
  for (const auto& column : columns_) header.push_back(column.header);
  std::string out = render_row(header);
  out += std::string(total, '-') + "\n";
  for (const auto& row : rows_) {
    out += row.empty() ? std::string(total, '-') + "\n" : render_row(row);
  }
  return out;
}

}  // namespace trainsnap::cli
