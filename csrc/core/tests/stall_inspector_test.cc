#include <string>
#include <vector>

#include "check.h"
#include "negotiation/stall_inspector.h"

namespace hbcore {
namespace {

std::map<std::string, TensorEntry> Pending(
    std::initializer_list<std::pair<const char*, double>> ages,
    Clock::time_point now, OpType op = OpType::kAllreduce) {
  std::map<std::string, TensorEntry> pending;
  for (const auto& a : ages) {
    TensorEntry e;
    e.request.name = a.first;
    e.request.op = op;
    e.enqueued = now - std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(a.second));
    pending[a.first] = std::move(e);
  }
  return pending;
}

StallReport Stall(double age) {
  StallReport r;
  r.name = "late";
  r.ready_ranks = {0, 2};
  r.missing_ranks = {1};
  r.age_seconds = age;
  return r;
}

TEST(StallCheckDueAfterCheckTimeThenNotUntilAgain) {
  Config config;
  config.stall_check_seconds = 5;
  StallInspector inspector(config);
  const Clock::time_point now = Clock::now() + std::chrono::seconds(10);
  CHECK(!inspector.Due({}, now));
  CHECK(!inspector.Due(Pending({{"young", 2.0}}, now), now));
  CHECK(inspector.Due(Pending({{"young", 2.0}, {"old", 6.0}}, now), now));
  inspector.Checked(now);
  // Checked just now: the next check waits another check time.
  CHECK(!inspector.Due(Pending({{"old", 6.0}}, now), now));
  const Clock::time_point later = now + std::chrono::seconds(5);
  CHECK(inspector.Due(Pending({{"old", 11.0}}, later), later));
}

TEST(StallJoinsNeverCountAndZeroDisables) {
  Config config;
  config.stall_check_seconds = 1;
  StallInspector inspector(config);
  const Clock::time_point now = Clock::now() + std::chrono::seconds(10);
  CHECK(!inspector.Due(Pending({{"hbcore.join", 9.0}}, now, OpType::kJoin),
                       now));
  config.stall_check_seconds = 0;
  StallInspector off(config);
  CHECK(!off.Due(Pending({{"old", 100.0}}, now), now));
}

TEST(StallShutdownOnlyAfterShutdownTime) {
  Config config;
  config.stall_check_seconds = 1;
  config.stall_shutdown_seconds = 5;
  StallInspector inspector(config);
  CHECK_EQ(inspector.Judge({Stall(3.0)}), std::string());
  const std::string reason = inspector.Judge({Stall(6.0)});
  CHECK_CONTAINS(reason, "tensor 'late'");
  CHECK_CONTAINS(reason, "rank(s) 0, 2");
  CHECK_CONTAINS(reason, "not yet by rank(s) 1");
  CHECK_CONTAINS(reason, "HB_STALL_SHUTDOWN_TIME_SECONDS=5");
  // With the shutdown time only, checks repeat at least every second.
  config.stall_check_seconds = 0;
  StallInspector shutdown_only(config);
  const Clock::time_point now = Clock::now() + std::chrono::seconds(10);
  CHECK(shutdown_only.Due(Pending({{"old", 6.0}}, now), now));
}

TEST(StallWarningsNameTheCauseAndWhatTheJobDoesNext) {
  Config config;
  config.stall_check_seconds = 60;
  StallInspector waits(config);
  std::vector<std::string> lines = waits.Warnings({Stall(75.0)});
  CHECK_EQ(lines.size(), 2u);
  CHECK_EQ(lines[0],
           std::string("Stall: tensor 'late' was submitted by rank(s) 0, 2 75 s ago "
                       "but not yet by rank(s) 1: those ranks are busy elsewhere "
                       "(a checkpoint or an evaluation on some ranks only), or have "
                       "diverged (a collective inside a branch the ranks take "
                       "differently, such as an if on the rank or a tf.cond, or "
                       "different tensor names)"));
  // Off by default (Horovod's): the warning says how to end a hung job.
  CHECK_EQ(lines[1],
           std::string("Stall: the job waits as long as a stall lasts, warning "
                       "every 60 s; HB_STALL_SHUTDOWN_TIME_SECONDS=S (hbrun "
                       "--stall-check-shutdown-time-seconds S) ends it with a "
                       "ShutdownError on every rank once a stall lasts S seconds"));
  config.stall_shutdown_seconds = 7200;
  StallInspector ends(config);
  lines = ends.Warnings({Stall(75.0), Stall(61.0)});
  CHECK_EQ(lines.size(), 3u);
  CHECK_EQ(lines[2],
           std::string("Stall: the job ends with a ShutdownError on every rank once "
                       "a stall lasts 7200 s (HB_STALL_SHUTDOWN_TIME_SECONDS)"));
  // In an elastic rank without a stall shutdown time of its own, the
  // elastic timeout is the limit, and the messages name it.
  config.stall_shutdown_setting = "HB_ELASTIC_TIMEOUT_SECONDS";
  lines = StallInspector(config).Warnings({Stall(75.0)});
  CHECK_EQ(lines[1],
           std::string("Stall: the job ends with a ShutdownError on every rank once "
                       "a stall lasts 7200 s (HB_ELASTIC_TIMEOUT_SECONDS)"));
  config.stall_shutdown_setting = "HB_STALL_SHUTDOWN_TIME_SECONDS";
  CHECK(waits.Warnings({}).empty());
  // A tensor younger than the check time is not stalled: only the old one
  // is named, and a check that finds only young ones says nothing.
  lines = waits.Warnings({Stall(0.2), Stall(75.0)});
  CHECK_EQ(lines.size(), 2u);
  CHECK_CONTAINS(lines[0], " 75 s ago");
  CHECK(waits.Warnings({Stall(0.2), Stall(59.9)}).empty());
  config.stall_check_seconds = 0;
  CHECK(StallInspector(config).Warnings({Stall(75.0)}).empty());
}

}  // namespace
}  // namespace hbcore
