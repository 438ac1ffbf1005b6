"""The Scheduler's queue disciplines (scheduler.py), and the defaults the daemon and the simulator share.

Without imports on purpose: config.py reads it, and the submit hook and wrapper read the config on every
submission, which must not load the scheduler and its policies.
"""

#: the queue disciplines: strict priority order, or EASY backfill (a reservation for the first job that does
#: not fit; later ones start only where they do not delay it)
QUEUES = ("fifo", "backfill")
#: the discipline of the daemon and of `compass simulate` by default, as Slurm's own sched/backfill
DEFAULT_QUEUE = "backfill"
#: the slack of a Scheduler or a simulation whose caller names none, and of a sweep plan saved before the
#: setting existed: EASY's rule, no job delays the head past its first reservation. The engine is the
#: textbook algorithm unless told otherwise.
EASY_SLACK = 0.0
#: backfill's slack for a blocked one-node whole-node head, the daemon's and the simulator's by default: EASY's
#: rule too, a name of its own because it is a site's choice (config.py "slack" says why not 0.5 any more)
DEFAULT_SLACK = EASY_SLACK
#: seconds a migrated job loses to its restart (requeue, start, restore from its checkpoint) when its driver names
#: none: the daemon's `migration_delay` by default. Sites restart from checkpoints in minutes, not seconds.
DEFAULT_RESTART_S = 120.0
#: seconds a migration pauses the job in `compass simulate` when --migration-delay names none: the paper's measured
#: checkpoint-restart (its results flat from 1 to 10 s); the held-out tables name 120, the daemon's default
SIM_RESTART_S = 8.0
#: a move that lets a blocked queue head start now must save it this many restarts of waiting: the head's expected
#: wait by its EASY reservation is at least ROOM_GATE x restart x moves (docs/results/history.md "Making room")
ROOM_GATE = 4.0
