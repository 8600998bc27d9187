#include "negotiation/process_set.h"

#include <algorithm>
#include <set>
#include <sstream>

namespace hbcore {

ProcessSetInfo ProcessSetInfo::Global(int size) {
  ProcessSetInfo info;
  for (int r = 0; r < size; ++r) info.ranks.push_back(r);
  return info;
}

int ProcessSetInfo::SetRank(int global) const {
  auto it = std::lower_bound(ranks.begin(), ranks.end(), global);
  return it != ranks.end() && *it == global
             ? static_cast<int>(it - ranks.begin())
             : -1;
}

std::string ProcessSetInfo::Suffix() const {
  if (id == 0) return "";
  return " in process set " + std::to_string(id) + " (" + RankList(ranks) +
         ")";
}

std::string RankList(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) out << ", ";
    out << ranks[i];
  }
  return out.str();
}

std::string CheckMembers(const std::vector<int>& ranks, int size) {
  if (ranks.empty()) return "a process set needs at least one rank";
  std::set<int> seen;
  for (int r : ranks) {
    if (r < 0 || r >= size) {
      return "rank " + std::to_string(r) + " is not in [0, " +
             std::to_string(size) + ")";
    }
    if (!seen.insert(r).second) {
      return "rank " + std::to_string(r) + " appears more than once";
    }
  }
  return "";
}

}  // namespace hbcore
