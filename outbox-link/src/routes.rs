//! What the kernel's link and route tables say about being online (Linux): pure, over the
//! bytes of netlink dump replies.
//!
//! Online means a default route (IPv4 or IPv6, unicast, in any table: Android and policy
//! routing keep theirs outside `main`) that leaves through an interface that is up, running
//! and not the loopback. Only the fixed headers and the few attributes needed are read, so a
//! message with an attribute this crate does not know is still counted.

use std::collections::HashSet;

use netlink_packet_core::{NetlinkBuffer, NlasIterator, NLMSG_DONE, NLMSG_ERROR};
use netlink_packet_route::link::{LinkFlags, LinkHeader};
use netlink_packet_route::route::{RouteFlags, RouteHeader, RouteNextHopFlags, RouteType};
use netlink_packet_route::AddressFamily;

/// `RTM_NEWLINK`: one interface, in a dump or a notification.
pub(crate) const RTM_NEWLINK: u16 = libc::RTM_NEWLINK;
/// `RTM_NEWROUTE`: one route.
pub(crate) const RTM_NEWROUTE: u16 = libc::RTM_NEWROUTE;
/// The size of the fixed header in front of a route's attributes (`rtmsg`).
const ROUTE_HEADER: usize = 12;
/// The `rtnexthop` in front of each path of a multipath route.
const NEXT_HOP_HEADER: usize = 8;

/// One message of a reply.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Message<'a> {
    /// An `RTM_*` message with its payload.
    Table {
        kind: u16,
        sequence: u32,
        flags: u16,
        payload: &'a [u8],
    },
    /// The end of a dump.
    Done { sequence: u32 },
    /// The kernel refused the request (an `NLMSG_ERROR` with a non-zero code).
    Error { sequence: u32, code: i32 },
}

/// Splits one datagram into its messages; a malformed tail ends the list.
pub(crate) fn messages(mut datagram: &[u8]) -> Vec<Message<'_>> {
    let mut out = Vec::new();
    while let Ok(buffer) = NetlinkBuffer::new_checked(datagram) {
        let length = buffer.length() as usize;
        let sequence = buffer.sequence_number();
        let payload = buffer.payload();
        out.push(match buffer.message_type() {
            NLMSG_DONE => Message::Done { sequence },
            NLMSG_ERROR => {
                let code = payload
                    .get(..4)
                    .and_then(|b| b.try_into().ok())
                    .map(i32::from_ne_bytes)
                    .unwrap_or(0);
                Message::Error { sequence, code }
            }
            kind => Message::Table {
                kind,
                sequence,
                flags: buffer.flags(),
                payload,
            },
        });
        // Messages are aligned to four bytes.
        let next = (length + 3) & !3;
        if next == 0 || next > datagram.len() {
            break;
        }
        datagram = &datagram[next..];
    }
    out
}

/// The parts of the tables that decide the answer.
#[derive(Debug, Default)]
pub(crate) struct Tables {
    /// Interfaces that are up, running and not the loopback.
    usable: HashSet<u32>,
    /// The usable output interfaces of each default route; `None` when the route names no way
    /// out this crate can read (a nexthop object without the compatible attributes).
    defaults: Vec<Option<Vec<u32>>>,
}

impl Tables {
    /// Takes in one `RTM_NEWLINK` payload.
    pub(crate) fn link(&mut self, payload: &[u8]) {
        let Ok(header) = LinkHeader::parse(payload) else {
            return;
        };
        let flags = header.flags;
        if flags.contains(LinkFlags::Up | LinkFlags::Running)
            && !flags.contains(LinkFlags::Loopback)
        {
            self.usable.insert(header.index);
        }
    }

    /// Takes in one `RTM_NEWROUTE` payload; only default routes are kept.
    pub(crate) fn route(&mut self, payload: &[u8]) {
        let Ok(header) = RouteHeader::parse(payload) else {
            return;
        };
        let family = matches!(
            header.address_family,
            AddressFamily::Inet | AddressFamily::Inet6
        );
        let unusable = RouteFlags::Dead | RouteFlags::Linkdown;
        if !family
            || header.destination_prefix_length != 0
            || header.kind != RouteType::Unicast
            || header.flags.intersects(unusable)
        {
            return;
        }
        let mut out = None;
        let attributes = payload.get(ROUTE_HEADER..).unwrap_or_default();
        for nla in NlasIterator::new(attributes).flatten() {
            let named = match nla.kind() {
                libc::RTA_OIF => u32_of(nla.value()).into_iter().collect(),
                libc::RTA_MULTIPATH => hops(nla.value()),
                _ => continue,
            };
            out.get_or_insert_with(Vec::new).extend(named);
        }
        self.defaults.push(out);
    }

    /// Whether these tables say the device is online.
    pub(crate) fn online(&self) -> bool {
        self.defaults.iter().any(|interfaces| match interfaces {
            Some(interfaces) => interfaces.iter().any(|i| self.usable.contains(i)),
            // A default route whose way out is not written in it: trusted if any interface
            // could carry it.
            None => !self.usable.is_empty(),
        })
    }
}

/// The interfaces of the usable paths of an `RTA_MULTIPATH` value.
fn hops(mut value: &[u8]) -> Vec<u32> {
    // A path that is dead or whose link is down carries nothing.
    let unusable = (RouteNextHopFlags::Dead | RouteNextHopFlags::Linkdown).bits();
    let mut out = Vec::new();
    while value.len() >= NEXT_HOP_HEADER {
        let length = usize::from(u16::from_ne_bytes([value[0], value[1]]));
        let flags = value[2];
        if let (Some(index), true) = (u32_of(&value[4..8]), flags & unusable == 0) {
            out.push(index);
        }
        let next = (length + 3) & !3;
        if length < NEXT_HOP_HEADER || next > value.len() {
            break;
        }
        value = &value[next..];
    }
    out
}

fn u32_of(value: &[u8]) -> Option<u32> {
    value.get(..4)?.try_into().ok().map(u32::from_ne_bytes)
}

#[cfg(test)]
#[path = "routes_tests.rs"]
mod tests;
