//! Who changed what: one `audit:` line on standard error for every change made through the
//! command or the page, and the words a discard leaves on its tombstone.
//!
//! A line reads
//!
//! ```text
//! audit: 2026-12-01T09:15:00.000Z user=alice(uid=1000) via=page verb=discard record=#8 done reason="sent by hand"
//! ```
//!
//! with the time of the change (UTC), the operating-system user, the tool (`command` or
//! `page`), the verb, the record and what became of it. On the page the user is the owner of
//! the browser's connection (found in `/proc/net/tcp` on Linux), else the user running
//! `outbox serve`. Values a person did not type come out through [`crate::escape`].

use std::fmt;
use std::net::SocketAddr;

use chrono::{TimeZone, Utc};
use outbox_core::{Millis, RecordId};

use crate::escape::visible;

/// Through which tool a person made a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// A verb of the `outbox` command.
    Command,
    /// A button of the `outbox serve` page.
    Page,
}

impl Via {
    /// `command` or `page`, as the log line says it.
    pub fn name(self) -> &'static str {
        match self {
            Via::Command => "command",
            Via::Page => "page",
        }
    }

    /// The words a discard adds to its reason on the tombstone: that a person did it, who,
    /// and through which tool.
    ///
    /// ```
    /// use outbox_cli::audit::{User, Via};
    /// let user = User { name: Some("alice".into()), uid: Some(1000) };
    /// assert_eq!(
    ///     Via::Page.reason("sent by hand", &user),
    ///     "sent by hand (discarded by a person, alice, on the outbox page)"
    /// );
    /// ```
    pub fn reason(self, reason: &str, user: &User) -> String {
        let tool = match self {
            Via::Command => "with the outbox command",
            Via::Page => "on the outbox page",
        };
        format!(
            "{} (discarded by a person, {}, {tool})",
            reason.trim(),
            user.short()
        )
    }
}

/// An operating-system user.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    /// The login name, when known.
    pub name: Option<String>,
    /// The numeric id, when known.
    pub uid: Option<u32>,
}

impl User {
    /// The user running this process: its real uid (from `/proc/self/status` on Linux) and
    /// the name `/etc/passwd` gives it, else the `USER` or `USERNAME` variable.
    pub fn current() -> User {
        let uid = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .and_then(|ids| ids.split_whitespace().next())
                    .and_then(|real| real.parse().ok())
            });
        let name = uid.and_then(name_of).or_else(|| {
            std::env::var("USER")
                .or_else(|_| std::env::var("USERNAME"))
                .ok()
        });
        User { name, uid }
    }

    /// The owner of the TCP connection from `peer` to this server's `local` address, when
    /// the system tells (Linux, IPv4), else the user running this process.
    pub fn of_peer(peer: SocketAddr, local: SocketAddr) -> User {
        match peer_uid(peer, local) {
            Some(uid) => User {
                name: name_of(uid),
                uid: Some(uid),
            },
            None => User::current(),
        }
    }

    fn short(&self) -> String {
        match (&self.name, self.uid) {
            (Some(name), _) => visible(name).into_owned(),
            (None, Some(uid)) => format!("uid {uid}"),
            (None, None) => "an unknown user".to_owned(),
        }
    }
}

impl fmt::Display for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.name, self.uid) {
            (Some(name), Some(uid)) => write!(f, "{}(uid={uid})", visible(name)),
            (Some(name), None) => write!(f, "{}", visible(name)),
            (None, Some(uid)) => write!(f, "uid={uid}"),
            (None, None) => f.write_str("unknown"),
        }
    }
}

/// The login name of `uid` in `/etc/passwd`.
fn name_of(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let id: u32 = fields.nth(1)?.parse().ok()?;
        (id == uid).then(|| name.to_owned())
    })
}

/// `/proc/net/tcp` writes an IPv4 socket as the address's bytes read as one native-endian
/// 32-bit word, and the port in host order, both in upper-case hex.
fn proc_address(addr: SocketAddr) -> Option<String> {
    match addr {
        SocketAddr::V4(v4) => Some(format!(
            "{:08X}:{:04X}",
            u32::from_ne_bytes(v4.ip().octets()),
            v4.port()
        )),
        SocketAddr::V6(_) => None,
    }
}

/// The uid owning the socket whose local end is `peer` and remote end `local`: the
/// browser's side of the connection.
fn peer_uid(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    let (ours, theirs) = (proc_address(local)?, proc_address(peer)?);
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (near, far, uid) = (fields.get(1)?, fields.get(2)?, fields.get(7)?);
        (*near == theirs && *far == ours)
            .then(|| uid.parse().ok())
            .flatten()
    })
}

/// One change, as its log line says it.
#[derive(Clone, Debug)]
pub struct Entry<'a> {
    /// When, in Unix milliseconds.
    pub at: Millis,
    /// Who.
    pub user: &'a User,
    /// Through which tool.
    pub via: Via,
    /// `retry`, `requeue`, `discard`, `prune` or `resume`.
    pub verb: &'a str,
    /// The record, or `None` for a change of many (a prune) or of none (a resume).
    pub record: Option<RecordId>,
    /// What became of it: `done`, or `unchanged` with why.
    pub result: &'a str,
    /// The reason a discard gave.
    pub reason: Option<&'a str>,
}

impl fmt::Display for Entry<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = i64::try_from(self.at)
            .ok()
            .and_then(|ms| Utc.timestamp_millis_opt(ms).single())
            .map_or_else(
                || format!("{}ms", self.at),
                |t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
            );
        write!(
            f,
            "audit: {at} user={} via={} verb={}",
            self.user,
            self.via.name(),
            self.verb
        )?;
        if let Some(id) = self.record {
            write!(f, " record=#{}", id.0)?;
        }
        write!(f, " {}", visible(self.result))?;
        if let Some(reason) = self.reason {
            // Debug quotes it and escapes every control character (as `\u{1b}`).
            write!(f, " reason={reason:?}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_names_the_time_user_tool_verb_record_and_result() {
        let user = User {
            name: Some("alice".into()),
            uid: Some(1000),
        };
        let entry = Entry {
            at: 1_796_116_500_000,
            user: &user,
            via: Via::Page,
            verb: "discard",
            record: Some(RecordId(8)),
            result: "done",
            reason: Some("sent\x1b[2J by hand"),
        };
        assert_eq!(
            entry.to_string(),
            "audit: 2026-12-01T09:15:00.000Z user=alice(uid=1000) via=page verb=discard \
             record=#8 done reason=\"sent\\u{1b}[2J by hand\""
        );
    }

    #[test]
    fn this_process_has_a_user() {
        let user = User::current();
        assert!(user.name.is_some() || user.uid.is_some(), "{user:?}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_owner_of_a_local_connection_is_found() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(server).unwrap();
        let (_accepted, peer) = listener.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        let uid = peer_uid(peer, server).expect("the connection in /proc/net/tcp");
        assert_eq!(Some(uid), User::current().uid);
        assert_eq!(
            peer_uid(server, peer),
            Some(uid),
            "the server's end is ours too"
        );
        let stranger: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(peer_uid(stranger, server), None);
    }

    #[test]
    fn a_loopback_socket_is_written_as_the_kernel_writes_it() {
        let addr: SocketAddr = "127.0.0.1:8417".parse().unwrap();
        let expected = if cfg!(target_endian = "little") {
            "0100007F:20E1"
        } else {
            "7F000001:20E1"
        };
        assert_eq!(proc_address(addr).unwrap(), expected);
    }
}
