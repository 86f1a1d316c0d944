//! An upstream child process (`--upstream-cmd`): its stdio as async pipes,
//! its exit awaited, signals sent only while its pid is still its own.
//!
//! On Linux this does not use tokio's `process` feature. With that feature
//! every runtime, each shard's included, reaps orphaned children each time
//! it parks: a `try_lock` and a `lock` of two process-wide mutexes, whether
//! or not a child was ever started. That was 0.3–1.1 % of each gateway's
//! samples at 4 requests in flight on two cores, among its hottest
//! functions, and on many cores it is two cache lines that every shard
//! writes on every park (`results/2026-12-05-child-reaper/`). Here a child
//! costs a thread that waits for it instead, and nothing costs anything
//! while no child runs.

#[cfg(target_os = "linux")]
pub use linux::UpstreamChild;

#[cfg(not(target_os = "linux"))]
pub use other::UpstreamChild;

/// The signals a child is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Asks it to exit (SIGTERM; on systems without signals, nothing).
    Terminate,
    /// Ends it (SIGKILL).
    Kill,
}

#[cfg(target_os = "linux")]
mod linux {
    use std::io;
    use std::os::fd::OwnedFd;
    use std::process::{Child, Command, ExitStatus, Stdio};
    use std::sync::{Arc, Mutex, PoisonError};

    use rustix::process::{Pid, Signal, WaitId, WaitIdOptions, kill_process, waitid};
    use tokio::net::unix::pipe;
    use tokio::sync::oneshot;

    use super::Stop;

    /// The child's stdin: the write end of a pipe.
    type UpstreamStdin = pipe::Sender;
    /// The child's stdout or stderr: the read end of a pipe.
    type UpstreamStdout = pipe::Receiver;

    /// A running child. Dropping it kills the child; a thread of its own
    /// reaps it in any case.
    #[derive(Debug)]
    pub struct UpstreamChild {
        pid: Pid,
        /// Whether the child has been reaped (its pid may then be another
        /// process's). Signals are sent under this lock, and the reaper
        /// takes it to reap, so a signal never reaches a stranger.
        reaped: Arc<Mutex<bool>>,
        exit: oneshot::Receiver<io::Result<ExitStatus>>,
        /// How the wait ended, once it has: asked again, the same answer
        /// (a oneshot receiver must not be polled after it completed).
        outcome: Option<Result<ExitStatus, (io::ErrorKind, String)>>,
    }

    impl UpstreamChild {
        /// Starts `program` with `args`, its stdin, stdout and stderr piped
        /// to this process. Needs a tokio runtime with I/O.
        pub fn spawn(
            program: &str,
            args: &[String],
        ) -> io::Result<(Self, UpstreamStdin, UpstreamStdout, UpstreamStdout)> {
            let mut child = Command::new(program)
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()?;
            let pipes = take_pipes(&mut child);
            let pid = Pid::from_child(&child);
            let reaped = Arc::new(Mutex::new(false));
            let (tell, exit) = oneshot::channel();
            let reaper = {
                let reaped = reaped.clone();
                std::thread::Builder::new()
                    .name(format!("npamp-child-{}", pid.as_raw_nonzero()))
                    .spawn(move || reap(child, &reaped, tell))
            };
            let me = Self {
                pid,
                reaped,
                exit,
                outcome: None,
            };
            if let Err(e) = reaper {
                // The child went with the closure that failed to start:
                // std's `Child` neither kills nor reaps on drop. Killed and
                // reaped here, and marked so, or dropping `me` would signal
                // its pid again.
                let mut reaped = me.reaped.lock().unwrap_or_else(PoisonError::into_inner);
                let _ = kill_process(pid, Signal::KILL);
                let _ = waitid(WaitId::Pid(pid), WaitIdOptions::EXITED);
                *reaped = true;
                return Err(e);
            }
            // With the reaper running, dropping `me` on an error kills the
            // child, and the reaper reaps it.
            let (stdin, stdout, stderr) = pipes?;
            Ok((me, stdin, stdout, stderr))
        }

        /// The child's process id.
        pub fn id(&self) -> u32 {
            self.pid.as_raw_nonzero().get().unsigned_abs()
        }

        /// Waits for the child to exit. Cancel-safe: a wait dropped before
        /// the end can be taken up again; one that ended, asked again,
        /// gives the same answer.
        pub async fn wait(&mut self) -> io::Result<ExitStatus> {
            let outcome = match self.outcome.take() {
                Some(outcome) => outcome,
                None => match (&mut self.exit).await {
                    Ok(Ok(status)) => Ok(status),
                    Ok(Err(e)) => Err((e.kind(), format!("waiting for the child: {e}"))),
                    Err(_) => Err((
                        io::ErrorKind::Other,
                        "the thread that waits for the child ended".to_owned(),
                    )),
                },
            };
            let answer = match &outcome {
                Ok(status) => Ok(*status),
                Err((kind, why)) => Err(io::Error::new(*kind, why.clone())),
            };
            self.outcome = Some(outcome);
            answer
        }

        /// Sends the child `stop`, if it has not been reaped yet.
        pub fn stop(&self, stop: Stop) {
            let reaped = self.reaped.lock().unwrap_or_else(PoisonError::into_inner);
            if !*reaped {
                let signal = match stop {
                    Stop::Terminate => Signal::TERM,
                    Stop::Kill => Signal::KILL,
                };
                let _ = kill_process(self.pid, signal);
            }
        }
    }

    impl Drop for UpstreamChild {
        fn drop(&mut self) {
            self.stop(Stop::Kill);
        }
    }

    fn take_pipes(
        child: &mut Child,
    ) -> io::Result<(UpstreamStdin, UpstreamStdout, UpstreamStdout)> {
        let missing = || io::Error::other("the child's stdio is not piped");
        let stdin = OwnedFd::from(child.stdin.take().ok_or_else(missing)?);
        let stdout = OwnedFd::from(child.stdout.take().ok_or_else(missing)?);
        let stderr = OwnedFd::from(child.stderr.take().ok_or_else(missing)?);
        Ok((
            pipe::Sender::from_owned_fd(stdin)?,
            pipe::Receiver::from_owned_fd(stdout)?,
            pipe::Receiver::from_owned_fd(stderr)?,
        ))
    }

    /// The reaper thread: waits until the child has exited without reaping
    /// it (`WNOWAIT`: its pid stays its own), then reaps it under the lock
    /// that signals are sent under, and tells the owner how it ended.
    fn reap(mut child: Child, reaped: &Mutex<bool>, tell: oneshot::Sender<io::Result<ExitStatus>>) {
        let pid = Pid::from_child(&child);
        let exited = loop {
            match waitid(
                WaitId::Pid(pid),
                WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
            ) {
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => break Err(io::Error::from(e)),
                Ok(_) => break Ok(()),
            }
        };
        let status = exited.and_then(|()| {
            let mut reaped = reaped.lock().unwrap_or_else(PoisonError::into_inner);
            let status = child.wait();
            *reaped = true;
            status
        });
        let _ = tell.send(status);
    }

    #[cfg(test)]
    #[tokio::test]
    async fn a_wait_that_failed_gives_the_same_answer_when_asked_again() {
        // The waiting thread gone without a word; marked reaped, so that
        // dropping this signals no one (the pid is this test's own).
        let (tell, exit) = oneshot::channel::<io::Result<ExitStatus>>();
        drop(tell);
        let pid = Pid::from_raw(i32::try_from(std::process::id()).expect("pid")).expect("non-zero");
        let mut child = UpstreamChild {
            pid,
            reaped: Arc::new(Mutex::new(true)),
            exit,
            outcome: None,
        };
        let first = child.wait().await.expect_err("no status");
        let again = child.wait().await.expect_err("the same, not a panic");
        assert_eq!(first.to_string(), again.to_string());
        child.stop(Stop::Kill);
    }
}

/// Elsewhere, tokio's child (and its orphan reaper, which only Linux
/// builds are spared).
#[cfg(not(target_os = "linux"))]
mod other {
    use std::io;
    use std::process::{ExitStatus, Stdio};

    use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

    use super::Stop;

    /// A running child (tokio's, killed when dropped).
    #[derive(Debug)]
    pub struct UpstreamChild(tokio::process::Child);

    impl UpstreamChild {
        pub fn spawn(
            program: &str,
            args: &[String],
        ) -> io::Result<(Self, ChildStdin, ChildStdout, ChildStderr)> {
            let mut child = tokio::process::Command::new(program)
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()?;
            let missing = || io::Error::other("the child's stdio is not piped");
            let stdin = child.stdin.take().ok_or_else(missing)?;
            let stdout = child.stdout.take().ok_or_else(missing)?;
            let stderr = child.stderr.take().ok_or_else(missing)?;
            Ok((Self(child), stdin, stdout, stderr))
        }

        pub fn id(&self) -> u32 {
            self.0.id().unwrap_or_default()
        }

        pub async fn wait(&mut self) -> io::Result<ExitStatus> {
            self.0.wait().await
        }

        pub fn stop(&mut self, stop: Stop) {
            match stop {
                Stop::Kill => {
                    let _ = self.0.start_kill();
                }
                // tokio's `id` is `None` once the child is reaped, so the
                // pid is still this child's.
                #[cfg(unix)]
                Stop::Terminate => {
                    if let Some(pid) = self
                        .0
                        .id()
                        .and_then(|id| i32::try_from(id).ok())
                        .and_then(rustix::process::Pid::from_raw)
                    {
                        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                    }
                }
                #[cfg(not(unix))]
                Stop::Terminate => {}
            }
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::time::{Duration, Instant};

    use rustix::process::{Pid, test_kill_process};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    use super::{Stop, UpstreamChild};

    fn argv(args: &[&str]) -> Vec<String> {
        args.iter().map(|&a| a.to_owned()).collect()
    }

    /// Whether a process of this pid exists, a zombie included.
    fn exists(pid: u32) -> bool {
        let pid = Pid::from_raw(i32::try_from(pid).expect("pid")).expect("non-zero");
        test_kill_process(pid).is_ok()
    }

    async fn gone_within(pid: u32, within: Duration) -> bool {
        let started = Instant::now();
        while started.elapsed() < within {
            if !exists(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    #[tokio::test]
    async fn stdio_is_piped_and_the_exit_is_reaped() {
        let (mut child, mut stdin, stdout, _stderr) =
            UpstreamChild::spawn("cat", &[]).expect("cat starts");
        stdin.write_all(b"{\"id\":1}\n").await.expect("write");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(5), lines.next_line())
            .await
            .expect("in time")
            .expect("read");
        assert_eq!(line.as_deref(), Some("{\"id\":1}"));
        drop(stdin);
        let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
            .await
            .expect("exits when its stdin closes")
            .expect("status");
        assert!(status.success());
        // Reaped: no zombie left behind.
        assert!(!exists(child.id()));
        // Asked again, the same answer.
        assert!(child.wait().await.expect("status").success());
    }

    #[tokio::test]
    async fn a_wait_given_up_can_be_taken_up_again_and_terminate_is_sigterm() {
        let (mut child, _stdin, _stdout, _stderr) =
            UpstreamChild::spawn("sleep", &argv(&["30"])).expect("sleep starts");
        let early = tokio::time::timeout(Duration::from_millis(50), child.wait()).await;
        assert!(early.is_err(), "still running");
        child.stop(Stop::Terminate);
        let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
            .await
            .expect("exits on SIGTERM")
            .expect("status");
        assert_eq!(status.signal(), Some(15));
        // Reaped: a signal now would find no process of its own, and is not sent.
        child.stop(Stop::Kill);
    }

    #[tokio::test]
    async fn a_child_dropped_is_killed_and_reaped() {
        let (child, _stdin, _stdout, _stderr) =
            UpstreamChild::spawn("sleep", &argv(&["30"])).expect("sleep starts");
        let pid = child.id();
        assert!(exists(pid));
        drop(child);
        assert!(
            gone_within(pid, Duration::from_secs(5)).await,
            "killed and reaped, no zombie"
        );
    }

    #[tokio::test]
    async fn a_program_that_cannot_start_is_an_error() {
        let e = UpstreamChild::spawn("/nonexistent/upstream", &[]).expect_err("no such program");
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }
}
