//! Accept steering: when the fd limit makes the master start more subscriber workers than
//! there are CPUs (53 for a million connections at a 20,000 fd limit on 2 cores), SO_REUSEPORT
//! alone spreads every new connection over all of them, so each worker wakes for about one
//! connection at a time and a ramp pays a process switch per connection (serve spent 83 µs
//! of CPU per connection over 53 workers against 27 µs over 2; BENCHMARKS.md). Instead, one
//! worker per CPU is *steered*: its listeners carry SO_INCOMING_CPU = that CPU, and the
//! kernel hands it every connection whose handshake runs there. A steered worker takes a
//! quantum of connections (1/16 of its share), then gives the preference back and tells the
//! master, which steers the CPU to the worker that holds the fewest. So workers fill in turn
//! and evenly, and none past its share: the connections already in a worker's accept queue
//! when it gives its CPU up (up to the listen backlog) still fit, since a worker is steered
//! only while that much room is left ([`Assignments`]'s mark). Nor may a full node refuse
//! because of it: what a worker took past its quantum is never evened out (once every worker
//! is past the mark the hash adds the same to each), so the fullest ends up to a full accept
//! queue above the mean. Steering therefore runs only where that queue fits in half the spread
//! slack each share carries (`plan::SPREAD_SLACK_PCT`; the hash's own spread takes the rest).
//! At the fd limit's layout for a million (53 workers of 19,812, slack 944) no useful queue
//! does: 4,096 and more refused ~5,000 subscribes near 1M, and a queue cut to 472 overflowed
//! ~800,000 times on a 2-core ramp (BENCHMARKS.md), so there the hash spreads, as before.
//! Nothing is closed or moved: every listener stays in the group, so a CPU with no steered
//! worker (none has room, or a hand-off is under way) falls back to the hash, as without
//! steering.
//!
//! This file holds the master's bookkeeping and the CPU numbers; the worker applies the
//! socket option and counts its quantum (`worker::steer`).

/// The CPUs the kernel may run handshakes on (the online ones); `0..n` for the `n` CPUs this
/// process may use when the list is unreadable.
pub fn online_cpus() -> Vec<u32> {
    c1m_sys::procfs::Root::live()
        .cpu_ids_online()
        .unwrap_or_else(|_| {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            (0..n as u32).collect()
        })
}

/// The connections a steered worker takes before its CPU is handed on: 1/16 of its share.
pub fn quantum(per_worker: u64) -> u64 {
    (per_worker / 16).max(1)
}

/// The longest accept queue steering allows: half of `slack`, the room a worker's share
/// leaves above an even spread of the node's connections.
fn queue_room(slack: u64) -> u64 {
    slack / 2
}

/// The length of a listener's accept queue: the listen backlog as the kernel caps it
/// (`net.core.somaxconn`, read once; 4096 when unreadable).
pub fn accept_queue(backlog: i32) -> u64 {
    let somaxconn =
        c1m_sys::procfs::sysctl_u64(&c1m_sys::procfs::Root::live(), "net.core.somaxconn")
            .unwrap_or(4096);
    (backlog.max(1) as u64).min(somaxconn)
}

/// The master's view: which worker each CPU is steered to, and which workers may take one.
pub struct Assignments {
    cpus: Vec<u32>,
    /// Per entry of `cpus`: the worker steered there.
    holder: Vec<Option<usize>>,
    /// Per worker: it gave a CPU up since its last stats report (its reported count is older
    /// than its quantum), so it is not chosen again until it reports.
    full_since_report: Vec<bool>,
    /// A worker is steered only below this many connections: its share minus a full accept
    /// queue and a quantum, so neither can take it past its share.
    mark: u64,
    quantum: u64,
    /// CPUs handed from one worker to another, since the start.
    pub moves: u64,
    /// CPUs the master took back from a steered worker that stopped answering.
    pub silent: u64,
}

impl Assignments {
    /// Steering for `workers` subscriber workers of `per_worker` connections each, `slack` of
    /// them above an even spread, behind listeners with `queue`-long accept queues; None when
    /// there are no more workers than CPUs (each can then listen alone; there is nothing to
    /// gain), when the queue is longer than the slack allows ([`queue_room`]), or when a full
    /// queue and a quantum leave a worker less than half its share to be steered with.
    pub fn new(
        cpus: Vec<u32>,
        (workers, per_worker, slack): (usize, u64, u64),
        queue: u64,
    ) -> Option<Assignments> {
        let quantum = quantum(per_worker);
        let mark = per_worker.checked_sub(queue + quantum)?;
        let fits = queue <= queue_room(slack) && mark >= per_worker / 2;
        (workers > cpus.len() && fits).then(|| Assignments {
            holder: vec![None; cpus.len()],
            cpus,
            full_since_report: vec![false; workers],
            mark,
            quantum,
            moves: 0,
            silent: 0,
        })
    }

    /// Steers every CPU without a worker to the worker that holds the fewest among those
    /// `connections` names (None: not taking connections) and are under the mark. Returns
    /// (worker, cpu, the connection count at which it hands the CPU on) for each steering to
    /// send.
    pub fn fill(&mut self, connections: impl Fn(usize) -> Option<u64>) -> Vec<(usize, u32, u64)> {
        let mut sent = Vec::new();
        for k in 0..self.cpus.len() {
            if self.holder[k].is_some() {
                continue;
            }
            let best = (0..self.full_since_report.len())
                .filter(|&w| !self.full_since_report[w] && !self.holder.contains(&Some(w)))
                .filter_map(|w| connections(w).map(|c| (c, w)))
                .filter(|&(c, _)| c < self.mark)
                .min();
            if let Some((c, w)) = best {
                self.holder[k] = Some(w);
                sent.push((w, self.cpus[k], (c + self.quantum).min(self.mark)));
            }
        }
        sent
    }

    /// `worker` took its quantum on `cpu` and stopped taking its connections first.
    pub fn full(&mut self, worker: usize, cpu: u32) {
        if let Some(k) = self.cpus.iter().position(|&c| c == cpu) {
            if self.holder[k] == Some(worker) {
                self.holder[k] = None;
                self.moves += 1;
            }
        }
        if let Some(f) = self.full_since_report.get_mut(worker) {
            *f = true;
        }
    }

    /// `worker` reported its figures: its count is current again.
    pub fn reported(&mut self, worker: usize) {
        if let Some(f) = self.full_since_report.get_mut(worker) {
            *f = false;
        }
    }

    /// `worker`'s process is gone: the CPUs it held are free (its successor starts unsteered).
    pub fn gone(&mut self, worker: usize) {
        for h in &mut self.holder {
            if *h == Some(worker) {
                *h = None;
            }
        }
    }

    /// (cpu, worker steered there) for `/status`.
    pub fn view(&self) -> Vec<(u32, Option<usize>)> {
        self.cpus
            .iter()
            .copied()
            .zip(self.holder.iter().copied())
            .collect()
    }

    /// (mark, quantum) for `/status`.
    pub fn limits(&self) -> (u64, u64) {
        (self.mark, self.quantum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_steering_without_more_workers_than_cpus_or_room_for_a_full_queue() {
        assert!(Assignments::new(vec![0, 1], (2, 1000, 200), 100).is_none());
        assert!(Assignments::new(vec![0, 1], (3, 1000, 200), 100).is_some());
        assert!(
            Assignments::new(vec![0, 1], (3, 1000, 1200), 600).is_none(),
            "mark under half"
        );
        assert!(
            Assignments::new(vec![0, 1], (3, 1000, 100), 100).is_none(),
            "a queue over half the slack: the fullest would end past its share"
        );
        assert!(Assignments::new(vec![0, 1], (3, 100, 5), 4096).is_none());
    }

    #[test]
    fn at_the_fd_limits_layout_for_a_million_the_default_queue_does_not_fit_the_slack() {
        // 53 workers of 19,812 for 1M: an even spread is 18,868, the slack 944.
        assert!(Assignments::new(vec![0, 1], (53, 19_812, 944), 4096).is_none());
        assert!(Assignments::new(vec![0, 1], (53, 19_812, 944), 472).is_some());
    }

    #[test]
    fn each_cpu_goes_to_the_emptiest_worker_for_a_quantum_and_then_on() {
        // Share 800, queue 100, quantum 50: steered only under 650.
        let mut a = Assignments::new(vec![0, 1], (4, 800, 200), 100).unwrap();
        assert_eq!(a.limits(), (650, 50));
        let mut conns = [Some(10), Some(0), Some(5), None]; // worker 3 not listening yet
        assert_eq!(a.fill(|w| conns[w]), vec![(1, 0, 50), (2, 1, 55)]);
        assert!(a.fill(|w| conns[w]).is_empty(), "both CPUs held");
        conns[1] = Some(50);
        a.full(1, 0);
        assert_eq!(a.moves, 1);
        assert_eq!(
            a.fill(|w| conns[w]),
            vec![(0, 0, 60)],
            "worker 0 holds the fewest"
        );
        conns[3] = Some(0);
        a.gone(2);
        conns[2] = None; // its successor has not reported yet
        assert_eq!(a.fill(|w| conns[w]), vec![(3, 1, 50)]);
        assert_eq!(a.view(), vec![(0, Some(0)), (1, Some(3))]);
    }

    #[test]
    fn a_quantum_ends_at_the_mark_and_no_worker_at_the_mark_is_steered() {
        let mut a = Assignments::new(vec![0], (3, 800, 200), 100).unwrap(); // mark 650
        let conns = [Some(640), Some(650), Some(700)];
        assert_eq!(a.fill(|w| conns[w]), vec![(0, 0, 650)]);
        a.full(0, 0);
        a.reported(0);
        let conns = [Some(650), Some(650), Some(700)];
        assert!(
            a.fill(|w| conns[w]).is_empty(),
            "every worker at the mark: the hash"
        );
    }

    #[test]
    fn a_worker_that_handed_its_cpu_on_is_not_chosen_again_before_it_reports() {
        let mut a = Assignments::new(vec![0], (2, 800, 200), 100).unwrap();
        let conns = [Some(0), Some(640)];
        assert_eq!(a.fill(|w| conns[w]), vec![(0, 0, 50)]);
        a.full(0, 0);
        // Worker 0's last report still says 0, but it took its quantum since.
        assert_eq!(
            a.fill(|w| conns[w]),
            vec![(1, 0, 650)],
            "the other, though fuller"
        );
        a.full(1, 0);
        assert!(
            a.fill(|w| conns[w]).is_empty(),
            "no worker with a current count"
        );
        a.reported(0);
        let conns = [Some(50), Some(650)];
        assert_eq!(a.fill(|w| conns[w]), vec![(0, 0, 100)]);
    }
}
