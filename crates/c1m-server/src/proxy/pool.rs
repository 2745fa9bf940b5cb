//! The proxy threads of one worker. The worker's loop is single-threaded and must never wait
//! on a backend, so each call is handed to a small pool of threads doing blocking HTTP with
//! `ureq` (one shared agent: its keep-alive connections to the backend are reused across
//! calls), and the answer comes back through a channel plus a [`mio::Waker`] (an eventfd the
//! loop polls like any socket). Why threads and not an HTTP client inside the loop: the loop
//! would then own a second kind of socket with its own partial reads, timeouts and pooling,
//! while a call's cost is dominated by the backend anyway. A waiting *connection* costs no
//! thread: the worker keeps the calls no thread can take yet as small queue entries of its
//! own and hands one over, its URL and JSON body built only then, when [`Pool::has_room`]
//! (so at most [`MAX_THREADS`] built calls exist per worker, however many connections wait).
//!
//! Threads start when calls are queued and none is idle, up to [`MAX_THREADS`] (small stacks:
//! they only build a request and read a bounded answer). The deadline covers the wait in the
//! queue: a call whose deadline passed before a thread took it is answered `Timeout` without
//! being made.

use super::{Answer, Call, Done, MAX_ANSWER};
use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most threads one worker starts for proxy calls (calls past it wait in the queue).
pub const MAX_THREADS: usize = 32;
const STACK: usize = 256 * 1024;
/// A failed call this close to its deadline is counted as a timeout (the socket's read
/// timeout fired).
const TIMEOUT_SLACK: Duration = Duration::from_millis(20);

pub struct Pool {
    jobs: Sender<Call>,
    shared: Arc<Shared>,
    done: Receiver<Done>,
    done_tx: Sender<Done>,
    waker: Arc<mio::Waker>,
    agent: ureq::Agent,
    threads: usize,
    /// Calls handed over and not yet answered back to the loop.
    in_flight: usize,
}

struct Shared {
    jobs: Mutex<Receiver<Call>>,
    /// Threads waiting for a call.
    idle: AtomicUsize,
    /// Calls handed over and not yet taken by a thread.
    queued: AtomicUsize,
}

impl Pool {
    pub fn new(waker: mio::Waker) -> Pool {
        let (jobs, rx) = channel();
        let (done_tx, done) = channel();
        Pool {
            jobs,
            shared: Arc::new(Shared {
                jobs: Mutex::new(rx),
                idle: AtomicUsize::new(0),
                queued: AtomicUsize::new(0),
            }),
            done,
            done_tx,
            waker: Arc::new(waker),
            agent: ureq::AgentBuilder::new()
                .max_idle_connections_per_host(MAX_THREADS)
                .user_agent(concat!("c1m/", env!("CARGO_PKG_VERSION")))
                .build(),
            threads: 0,
            in_flight: 0,
        }
    }

    /// Calls handed over whose answers the loop has not taken yet.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Whether a call handed over now is taken by a thread at once (one is idle, or another
    /// may start), rather than waiting built in the pool's queue.
    pub fn has_room(&self) -> bool {
        self.in_flight < MAX_THREADS
    }

    /// Hands a call to the threads (starting one when every thread is busy). The caller has
    /// checked the in-flight bound.
    pub fn submit(&mut self, call: Call) {
        self.in_flight += 1;
        let queued = self.shared.queued.fetch_add(1, Ordering::SeqCst) + 1;
        if self.jobs.send(call).is_err() {
            // Every thread is gone (they only stop when the pool is dropped): nothing to do.
            return;
        }
        if queued > self.shared.idle.load(Ordering::SeqCst) && self.threads < MAX_THREADS {
            self.spawn();
        }
    }

    fn spawn(&mut self) {
        let shared = Arc::clone(&self.shared);
        let done = self.done_tx.clone();
        let waker = Arc::clone(&self.waker);
        let agent = self.agent.clone();
        let started = std::thread::Builder::new()
            .name("c1m-proxy".into())
            .stack_size(STACK)
            .spawn(move || run(&shared, &done, &waker, &agent));
        match started {
            Ok(_) => self.threads += 1,
            // The calls already queued are taken by the threads there are; with none, they
            // wait until a later submit manages to start one (and time out meanwhile).
            Err(e) => {
                tracing::error!(error = %e, threads = self.threads, "starting a proxy thread")
            }
        }
    }

    /// The answers that came back since the last call.
    pub fn take_done(&mut self) -> Vec<Done> {
        let mut out = Vec::new();
        while let Ok(d) = self.done.try_recv() {
            out.push(d);
        }
        self.in_flight -= out.len().min(self.in_flight);
        out
    }
}

fn run(shared: &Shared, done: &Sender<Done>, waker: &mio::Waker, agent: &ureq::Agent) {
    loop {
        shared.idle.fetch_add(1, Ordering::SeqCst);
        let call = {
            let jobs = shared.jobs.lock().unwrap_or_else(|e| e.into_inner());
            jobs.recv()
        };
        shared.idle.fetch_sub(1, Ordering::SeqCst);
        let Ok(call) = call else {
            return; // the pool is gone
        };
        shared.queued.fetch_sub(1, Ordering::SeqCst);
        let answer = post(agent, &call);
        let answer = Done {
            kind: call.kind,
            token: call.token,
            answer,
            micros: call.submitted.elapsed().as_micros() as u64,
            publish: call.publish,
        };
        if done.send(answer).is_err() {
            return;
        }
        // A failed wake leaves the answer for the loop's next turn (it polls at least every tick).
        let _ = waker.wake();
    }
}

fn post(agent: &ureq::Agent, call: &Call) -> Answer {
    let now = Instant::now();
    let Some(left) = call
        .deadline
        .checked_duration_since(now)
        .filter(|d| !d.is_zero())
    else {
        return Answer::Timeout;
    };
    let sent = agent
        .post(&call.url)
        .timeout(left)
        .set("Content-Type", "application/json")
        .send_bytes(&call.body);
    let timed_out = || Instant::now() + TIMEOUT_SLACK >= call.deadline;
    let response = match sent {
        Ok(r) => r,
        Err(ureq::Error::Status(code, _)) => {
            return Answer::Failed(format!("the backend answered HTTP {code}"))
        }
        Err(_) if timed_out() => return Answer::Timeout,
        Err(e) => return Answer::Failed(format!("the call failed: {e}")),
    };
    let mut body = Vec::new();
    match response
        .into_reader()
        .take(MAX_ANSWER as u64 + 1)
        .read_to_end(&mut body)
    {
        Ok(_) if body.len() > MAX_ANSWER => {
            Answer::Failed(format!("the answer is over {MAX_ANSWER} bytes"))
        }
        Ok(_) => super::parse_answer(&body),
        Err(_) if timed_out() => Answer::Timeout,
        Err(e) => Answer::Failed(format!("reading the answer: {e}")),
    }
}
