// Who belongs to a process set: pure data, the same on every rank. The
// runtime keeps one per set (set 0 is every rank); the coordinator and the
// stall inspector use it to name ranks in messages by their global rank,
// whatever their rank inside the set.
#ifndef HBCORE_NEGOTIATION_PROCESS_SET_H_
#define HBCORE_NEGOTIATION_PROCESS_SET_H_

#include <string>
#include <vector>

namespace hbcore {

struct ProcessSetInfo {
  int id = 0;
  // Members' global ranks, ascending: set rank i is global rank ranks[i].
  std::vector<int> ranks;

  // The global set of `size` ranks.
  static ProcessSetInfo Global(int size);

  int size() const { return static_cast<int>(ranks.size()); }
  int GlobalRank(int set_rank) const { return ranks[set_rank]; }
  // This set's rank of global rank `global`, or -1 if it is not a member.
  int SetRank(int global) const;
  // "" for the global set; else " in process set 1 (ranks 0, 2)", to
  // append to a message about one of its tensors.
  std::string Suffix() const;
};

// "rank 3" or "ranks 0, 2, 5".
std::string RankList(const std::vector<int>& ranks);

// Checks a list of member ranks given by a user: non-empty, each in
// [0, size), no repeats. Returns "" when valid, else why not.
std::string CheckMembers(const std::vector<int>& ranks, int size);

}  // namespace hbcore

#endif  // HBCORE_NEGOTIATION_PROCESS_SET_H_
