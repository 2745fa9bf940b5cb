//! Accept steering: when the fd limit makes the master start more subscriber workers than
//! there are CPUs (53 for a million connections at a 20,000 fd limit on 2 cores), SO_REUSEPORT
//! alone spreads every new connection over all of them, so each worker wakes for about one
//! connection at a time and a ramp pays a process switch per connection (serve spent 83 µs
//! of CPU per connection over 53 workers against 27 µs over 2; BENCHMARKS.md). Instead, one
//! worker per CPU is *steered*: its listeners carry SO_INCOMING_CPU = that CPU, and the
//! kernel hands it every connection whose handshake runs there. A steered worker that reaches
//! its [`fill_mark`] takes the preference back and tells the master, which steers the CPU to
//! the worker with the most room. Nothing is closed or moved: every listener stays in the
//! group, so a CPU with no steered worker (none has room, or a hand-off is under way) falls
//! back to the hash, as without steering.
//!
//! This file holds what both sides agree on (the fill mark, the CPU numbers) and the master's
//! bookkeeping ([`Assignments`]); the worker applies the socket option (`worker::steer`).

/// The connections at which a steered worker gives its CPU up: 7/8 of its share, so the
/// connections already in its accept queue, and its part of the hash fallback later, still
/// fit under the share.
pub fn fill_mark(per_worker: usize) -> usize {
    per_worker - per_worker / 8
}

/// The CPUs the kernel may run handshakes on (`/sys/devices/system/cpu/online`, e.g. `0-3,6`);
/// `0..n` for the `n` CPUs this process may use when that file is unreadable.
pub fn online_cpus() -> Vec<u32> {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|list| parse_cpu_list(&list))
        .unwrap_or_else(|| {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            (0..n as u32).collect()
        })
}

/// A kernel CPU list (`0-3,6,8-9`); None when it is not one.
fn parse_cpu_list(list: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 4096 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// The master's view: which worker each CPU is steered to, and which workers may take one.
pub struct Assignments {
    cpus: Vec<u32>,
    /// Per entry of `cpus`: the worker steered there.
    holder: Vec<Option<usize>>,
    /// Per worker: it gave a CPU up since its last stats report (its reported count is older
    /// than the fill it announced), so it is not chosen again until it reports.
    full_since_report: Vec<bool>,
    fill_mark: u64,
    /// CPUs handed from a full worker to another, since the start.
    pub moves: u64,
}

impl Assignments {
    /// Steering for `workers` subscriber workers of `per_worker` connections each; None when
    /// there are no more workers than CPUs (each can then listen alone; there is nothing to
    /// gain).
    pub fn new(cpus: Vec<u32>, workers: usize, per_worker: u64) -> Option<Assignments> {
        (workers > cpus.len()).then(|| Assignments {
            holder: vec![None; cpus.len()],
            cpus,
            full_since_report: vec![false; workers],
            fill_mark: fill_mark(per_worker as usize) as u64,
            moves: 0,
        })
    }

    /// Steers every CPU without a worker to the worker with the most room among those
    /// `connections` names (None: not taking connections), if one is under the fill mark by
    /// a sixteenth of it. Returns (worker, cpu) for each steering to send.
    pub fn fill(&mut self, connections: impl Fn(usize) -> Option<u64>) -> Vec<(usize, u32)> {
        let mut sent = Vec::new();
        for k in 0..self.cpus.len() {
            if self.holder[k].is_some() {
                continue;
            }
            let best = (0..self.full_since_report.len())
                .filter(|&w| !self.full_since_report[w] && !self.holder.contains(&Some(w)))
                .filter_map(|w| connections(w).map(|c| (c, w)))
                .filter(|&(c, _)| c + self.fill_mark / 16 < self.fill_mark)
                .min();
            if let Some((_, w)) = best {
                self.holder[k] = Some(w);
                sent.push((w, self.cpus[k]));
            }
        }
        sent
    }

    /// `worker` reached the fill mark on `cpu` and stopped taking its connections first.
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0-3,6,8-9"), Some(vec![0, 1, 2, 3, 6, 8, 9]));
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn no_steering_without_more_workers_than_cpus() {
        assert!(Assignments::new(vec![0, 1], 2, 1000).is_none());
        assert!(Assignments::new(vec![0, 1], 3, 1000).is_some());
    }

    #[test]
    fn each_cpu_goes_to_the_emptiest_worker_and_moves_when_its_worker_is_full() {
        let mut a = Assignments::new(vec![0, 1], 4, 800).unwrap(); // fill mark 700
        let mut conns = [Some(10), Some(0), Some(5), None]; // worker 3 not listening yet
        assert_eq!(a.fill(|w| conns[w]), vec![(1, 0), (2, 1)]);
        assert!(a.fill(|w| conns[w]).is_empty(), "both CPUs held");
        conns[1] = Some(700);
        a.full(1, 0);
        assert_eq!(a.moves, 1);
        assert_eq!(
            a.fill(|w| conns[w]),
            vec![(0, 0)],
            "worker 0 has the most room"
        );
        conns[3] = Some(0);
        a.gone(2);
        conns[2] = None; // its successor has not reported yet
        assert_eq!(a.fill(|w| conns[w]), vec![(3, 1)]);
        assert_eq!(a.view(), vec![(0, Some(0)), (1, Some(3))]);
    }

    #[test]
    fn a_full_worker_is_not_chosen_again_before_it_reports() {
        let mut a = Assignments::new(vec![0], 2, 800).unwrap();
        let conns = [Some(0), Some(690)]; // worker 1 near the mark: no room
        assert_eq!(a.fill(|w| conns[w]), vec![(0, 0)]);
        a.full(0, 0);
        // Worker 0's last report still says 0, but it announced the mark.
        assert!(
            a.fill(|w| conns[w]).is_empty(),
            "no worker with room is known"
        );
        a.reported(0);
        let conns = [Some(100), Some(690)];
        assert_eq!(a.fill(|w| conns[w]), vec![(0, 0)], "closes made room again");
    }
}
