//! The process's file-descriptor limit: `serve` raises its soft `RLIMIT_NOFILE` to the hard
//! limit (systemd's default soft limit is 1024), and the server checks its connection cap
//! against what it got. (`rlim_t` is `u64` on the 64-bit Linux the broker runs on.)

use std::io;

/// The soft and hard `RLIMIT_NOFILE`.
pub fn nofile() -> io::Result<(u64, u64)> {
    let lim = get()?;
    Ok((lim.rlim_cur, lim.rlim_max))
}

fn get() -> io::Result<libc::rlimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own and reads nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(lim)
}

/// Raise the soft limit to the hard one; returns the soft limit before and after.
pub fn raise_nofile() -> io::Result<(u64, u64)> {
    let mut lim = get()?;
    let soft = lim.rlim_cur;
    if lim.rlim_cur >= lim.rlim_max {
        return Ok((soft, soft));
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: setrlimit reads the struct we own; raising the soft limit up to the hard one is
    // always permitted.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((soft, nofile()?.0))
}

#[cfg(test)]
mod tests {
    #[test]
    fn raising_reaches_the_hard_limit() {
        let (_, after) = super::raise_nofile().unwrap();
        let (soft, hard) = super::nofile().unwrap();
        assert_eq!((after, soft), (hard, hard));
    }
}
