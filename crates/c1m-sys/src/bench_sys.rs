//! Small process-level helpers `c1m bench` needs: a SIGINT flag for the coordinator (so an
//! interrupted run still writes its report) and ignoring SIGINT in workers (a terminal's ^C goes
//! to the whole process group; workers must stop when the coordinator says so, or die with it).

use crate::cvt;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

static SIGINT_SEEN: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    SIGINT_SEEN.store(true, Ordering::SeqCst);
}

fn set_handler(signal: libc::c_int, handler: libc::sighandler_t) -> io::Result<()> {
    // SAFETY: `sa` is zero-initialised (a valid sigaction: empty mask, no flags) and then given
    // a handler that is either SIG_IGN or an extern "C" fn doing only an atomic store.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler;
        sa.sa_flags = libc::SA_RESTART;
        cvt(libc::sigemptyset(&mut sa.sa_mask))?;
        cvt(libc::sigaction(signal, &sa, std::ptr::null_mut()))?;
    }
    Ok(())
}

/// Installs a SIGINT and SIGTERM handler that only raises a flag; poll it with [`sigint_seen`].
pub fn install_sigint_flag() -> io::Result<()> {
    let handler = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
    set_handler(libc::SIGINT, handler)?;
    set_handler(libc::SIGTERM, handler)
}

/// Whether SIGINT/SIGTERM arrived since [`install_sigint_flag`].
pub fn sigint_seen() -> bool {
    SIGINT_SEEN.load(Ordering::SeqCst)
}

/// Ignores SIGINT in this process (and, across exec, its children keep it ignored).
pub fn ignore_sigint() -> io::Result<()> {
    set_handler(libc::SIGINT, libc::SIG_IGN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_starts_clear_and_handlers_install() {
        install_sigint_flag().unwrap();
        assert!(!sigint_seen());
    }
}
