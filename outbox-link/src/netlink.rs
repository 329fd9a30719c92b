//! The Linux source: the kernel's route netlink notifications, and a dump of its link and
//! route tables when a debounce window closes.
//!
//! Two sockets, both opened in the network namespace of the thread that starts the signal:
//! one subscribed to link, address and route notifications (IPv4 and IPv6), read through
//! tokio's readiness so that an idle device costs no wake-up; and one for dumps. A
//! notification is not parsed: it only says "read again". Reading the whole table, rather
//! than applying each notification, is what makes it correct, because the kernel drops IPv4
//! routes silently when their interface goes down or their address goes away; the link and
//! address notifications are what report those.

use std::io;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::link::LinkMessage;
use netlink_packet_route::route::RouteMessage;
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket};
use tokio::io::unix::AsyncFd;

use crate::error::Error;
use crate::routes::{messages, Message, Tables, RTM_NEWLINK, RTM_NEWROUTE};
use crate::signal::{End, Source};

/// The notification groups: whatever can take a default route or its interface away.
const GROUPS: [u32; 5] = [
    libc::RTNLGRP_LINK,
    libc::RTNLGRP_IPV4_IFADDR,
    libc::RTNLGRP_IPV4_ROUTE,
    libc::RTNLGRP_IPV6_IFADDR,
    libc::RTNLGRP_IPV6_ROUTE,
];
/// Large enough for any datagram the kernel sends on a route socket (it caps dump parts at
/// 32 KiB), so nothing is truncated.
const DATAGRAM: usize = 64 * 1024;
/// Dumps retried when the kernel says the tables changed while it was writing one.
const DUMP_TRIES: usize = 3;

/// The kernel's tables, watched.
pub(crate) struct Netlink {
    events: AsyncFd<Socket>,
    dumps: Socket,
    sequence: u32,
    buffer: Vec<u8>,
}

impl Netlink {
    /// Opens both sockets in the calling thread's network namespace and reads the tables
    /// once. Needs a tokio runtime with I/O enabled.
    pub(crate) fn open() -> Result<(Netlink, bool), Error> {
        let mut events = Socket::new(NETLINK_ROUTE).map_err(|e| Error::os("netlink socket", e))?;
        events
            .bind_auto()
            .map_err(|e| Error::os("netlink bind", e))?;
        for group in GROUPS {
            events
                .add_membership(group)
                .map_err(|e| Error::os("netlink notification group", e))?;
        }
        events
            .set_non_blocking(true)
            .map_err(|e| Error::os("netlink non-blocking", e))?;
        // `AsyncFd::register` is the same call marked unsafe, which this workspace forbids;
        // its contract holds here: the `Socket` owns its descriptor and the `AsyncFd` owns
        // the `Socket`, so the descriptor is deregistered before it is closed, never replaced.
        #[allow(deprecated)]
        let events = AsyncFd::new(events).map_err(|e| Error::os("netlink readiness", e))?;
        // The dump socket blocks: a dump is written by the kernel as it is read, from tables
        // in memory, so a read never waits on anything outside the machine.
        let mut dumps = Socket::new(NETLINK_ROUTE).map_err(|e| Error::os("netlink socket", e))?;
        dumps
            .bind_auto()
            .map_err(|e| Error::os("netlink bind", e))?;
        let mut netlink = Netlink {
            events,
            dumps,
            sequence: 0,
            buffer: Vec::with_capacity(DATAGRAM),
        };
        let online = netlink
            .tables()
            .map_err(|e| Error::os("netlink dump", e))?
            .online();
        Ok((netlink, online))
    }

    /// The link and route tables as they are now.
    fn tables(&mut self) -> io::Result<Tables> {
        let mut tries = 0;
        loop {
            tries += 1;
            let mut tables = Tables::default();
            let mut consistent = self.dump(
                RouteNetlinkMessage::GetLink(LinkMessage::default()),
                &mut tables,
            )?;
            consistent &= self.dump(
                RouteNetlinkMessage::GetRoute(RouteMessage::default()),
                &mut tables,
            )?;
            // An inconsistent dump is still the best reading there is; the change that made
            // it so has sent a notification, which opens the next window.
            if consistent || tries == DUMP_TRIES {
                return Ok(tables);
            }
        }
    }

    /// One dump into `tables`; false when the kernel flagged it as interrupted by a change.
    fn dump(&mut self, request: RouteNetlinkMessage, tables: &mut Tables) -> io::Result<bool> {
        self.sequence = self.sequence.wrapping_add(1);
        let sequence = self.sequence;
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        header.sequence_number = sequence;
        let mut message = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(request));
        message.finalize();
        let mut bytes = vec![0; message.buffer_len()];
        message.serialize(&mut bytes);
        self.dumps.send(&bytes, 0)?;
        let mut consistent = true;
        loop {
            self.buffer.clear();
            self.dumps.recv(&mut self.buffer, 0)?;
            for message in messages(&self.buffer) {
                match message {
                    Message::Table { sequence: s, .. }
                    | Message::Done { sequence: s }
                    | Message::Error { sequence: s, .. }
                        if s != sequence => {}
                    Message::Done { .. } => return Ok(consistent),
                    Message::Error { code, .. } if code != 0 => {
                        return Err(io::Error::from_raw_os_error(-code));
                    }
                    Message::Error { .. } => {}
                    Message::Table {
                        kind,
                        flags,
                        payload,
                        ..
                    } => {
                        consistent &= flags & netlink_packet_core::NLM_F_DUMP_INTR == 0;
                        match kind {
                            RTM_NEWLINK => tables.link(payload),
                            RTM_NEWROUTE => tables.route(payload),
                            _ => {}
                        }
                    }
                }
            }
        }
    }
}

impl Source for Netlink {
    async fn changed(&mut self) -> Result<(), End> {
        loop {
            let mut ready = self.events.readable().await.map_err(End::Failed)?;
            let mut heard = false;
            loop {
                self.buffer.clear();
                match ready.get_inner().recv(&mut self.buffer, 0) {
                    Ok(_) => heard = true,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        ready.clear_ready();
                        break;
                    }
                    // The kernel dropped notifications for lack of room: the next reading
                    // of the tables is what catches up.
                    Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => heard = true,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(End::Failed(e)),
                }
            }
            if heard {
                return Ok(());
            }
        }
    }

    fn read(&mut self) -> Result<bool, End> {
        self.tables()
            .map(|tables| tables.online())
            .map_err(End::Failed)
    }
}
