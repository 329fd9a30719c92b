//! The tables' answer on messages built as the kernel writes them.

use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_MULTIPART};
use netlink_packet_route::link::LinkMessage;
use netlink_packet_route::route::{RouteAttribute, RouteMessage, RouteNextHop};
use netlink_packet_route::RouteNetlinkMessage;

use super::*;

const LO: u32 = 1;
const ETH: u32 = 2;
const WLAN: u32 = 3;

fn datagram(messages: Vec<RouteNetlinkMessage>, sequence: u32) -> Vec<u8> {
    let mut out = Vec::new();
    for inner in messages {
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_MULTIPART;
        header.sequence_number = sequence;
        let mut message = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(inner));
        message.finalize();
        let mut bytes = vec![0; message.buffer_len()];
        message.serialize(&mut bytes);
        out.extend(bytes);
    }
    out
}

fn link(index: u32, flags: LinkFlags) -> RouteNetlinkMessage {
    let mut message = LinkMessage::default();
    message.header.index = index;
    message.header.flags = flags;
    RouteNetlinkMessage::NewLink(message)
}

fn up(index: u32) -> RouteNetlinkMessage {
    link(
        index,
        LinkFlags::Up | LinkFlags::Running | LinkFlags::LowerUp,
    )
}

fn route(
    family: AddressFamily,
    prefix: u8,
    kind: RouteType,
    attributes: Vec<RouteAttribute>,
) -> RouteNetlinkMessage {
    let mut message = RouteMessage::default();
    message.header.address_family = family;
    message.header.destination_prefix_length = prefix;
    message.header.kind = kind;
    message.header.table = RouteHeader::RT_TABLE_MAIN;
    message.attributes = attributes;
    RouteNetlinkMessage::NewRoute(message)
}

fn default_via(family: AddressFamily, oif: u32) -> RouteNetlinkMessage {
    route(
        family,
        0,
        RouteType::Unicast,
        vec![RouteAttribute::Oif(oif)],
    )
}

fn online(messages: Vec<RouteNetlinkMessage>) -> bool {
    let bytes = datagram(messages, 7);
    let mut tables = Tables::default();
    for message in messages_of(&bytes) {
        if let Message::Table { kind, payload, .. } = message {
            match kind {
                RTM_NEWLINK => tables.link(payload),
                RTM_NEWROUTE => tables.route(payload),
                _ => {}
            }
        }
    }
    tables.online()
}

fn messages_of(bytes: &[u8]) -> Vec<Message<'_>> {
    messages(bytes)
}

#[test]
fn a_default_route_through_an_interface_that_is_up_is_online() {
    assert!(online(vec![
        up(LO),
        up(ETH),
        default_via(AddressFamily::Inet, ETH)
    ]));
    assert!(online(vec![
        up(ETH),
        default_via(AddressFamily::Inet6, ETH)
    ]));
}

#[test]
fn no_default_route_is_offline_whatever_the_interfaces() {
    let subnet = route(
        AddressFamily::Inet,
        24,
        RouteType::Unicast,
        vec![RouteAttribute::Oif(ETH)],
    );
    assert!(!online(vec![up(ETH), up(WLAN), subnet]));
    assert!(!online(vec![]));
}

#[test]
fn loopback_alone_is_offline_even_with_a_default_route_through_it() {
    let lo = link(LO, LinkFlags::Up | LinkFlags::Running | LinkFlags::Loopback);
    assert!(!online(vec![lo, default_via(AddressFamily::Inet, LO)]));
}

#[test]
fn a_default_route_through_an_interface_that_is_down_or_without_carrier_is_offline() {
    let down = link(ETH, LinkFlags::Broadcast);
    assert!(!online(vec![down, default_via(AddressFamily::Inet, ETH)]));
    let no_carrier = link(ETH, LinkFlags::Up | LinkFlags::Broadcast);
    assert!(!online(vec![
        no_carrier,
        default_via(AddressFamily::Inet, ETH)
    ]));
    // Up, but the route itself is flagged: its link is down.
    let mut flagged = RouteMessage::default();
    flagged.header.address_family = AddressFamily::Inet;
    flagged.header.kind = RouteType::Unicast;
    flagged.header.flags = RouteFlags::Linkdown;
    flagged.attributes = vec![RouteAttribute::Oif(ETH)];
    assert!(!online(vec![
        up(ETH),
        RouteNetlinkMessage::NewRoute(flagged)
    ]));
}

#[test]
fn blackhole_unreachable_and_foreign_family_defaults_do_not_count() {
    for kind in [
        RouteType::BlackHole,
        RouteType::Unreachable,
        RouteType::Prohibit,
    ] {
        assert!(!online(vec![
            up(ETH),
            route(AddressFamily::Inet, 0, kind, vec![])
        ]));
    }
    assert!(!online(vec![
        up(ETH),
        default_via(AddressFamily::Mpls, ETH)
    ]));
}

#[test]
fn a_multipath_default_counts_its_usable_paths_only() {
    let hop = |index: u32, flags: RouteNextHopFlags| {
        let mut hop = RouteNextHop::default();
        hop.interface_index = index;
        hop.flags = flags;
        hop
    };
    let multipath = |hops| {
        route(
            AddressFamily::Inet,
            0,
            RouteType::Unicast,
            vec![RouteAttribute::MultiPath(hops)],
        )
    };
    let dead = RouteNextHopFlags::Dead | RouteNextHopFlags::Linkdown;
    assert!(online(vec![
        up(WLAN),
        multipath(vec![hop(ETH, dead), hop(WLAN, RouteNextHopFlags::empty())])
    ]));
    assert!(!online(vec![
        up(ETH),
        up(WLAN),
        multipath(vec![hop(ETH, dead), hop(WLAN, RouteNextHopFlags::Dead)])
    ]));
}

#[test]
fn a_default_route_that_names_no_interface_is_trusted_when_one_is_usable() {
    let bare = || route(AddressFamily::Inet6, 0, RouteType::Unicast, vec![]);
    assert!(online(vec![up(ETH), bare()]));
    assert!(!online(vec![link(ETH, LinkFlags::empty()), bare()]));
}

#[test]
fn a_dump_reply_splits_into_its_messages_with_done_and_errors() {
    let mut bytes = datagram(vec![up(ETH), default_via(AddressFamily::Inet, ETH)], 9);
    // NLMSG_DONE, then an NLMSG_ERROR carrying -ENOBUFS, as the kernel writes them.
    for (kind, code) in [(NLMSG_DONE, 0i32), (NLMSG_ERROR, -libc::ENOBUFS)] {
        bytes.extend(20u32.to_ne_bytes());
        bytes.extend(kind.to_ne_bytes());
        bytes.extend(0u16.to_ne_bytes());
        bytes.extend(9u32.to_ne_bytes());
        bytes.extend(0u32.to_ne_bytes());
        bytes.extend(code.to_ne_bytes());
    }
    let parsed = messages_of(&bytes);
    assert_eq!(parsed.len(), 4, "{parsed:?}");
    assert!(matches!(
        parsed[0],
        Message::Table {
            kind: RTM_NEWLINK,
            sequence: 9,
            ..
        }
    ));
    assert!(matches!(
        parsed[1],
        Message::Table {
            kind: RTM_NEWROUTE,
            ..
        }
    ));
    assert_eq!(parsed[2], Message::Done { sequence: 9 });
    assert_eq!(
        parsed[3],
        Message::Error {
            sequence: 9,
            code: -libc::ENOBUFS
        }
    );
}

#[test]
fn a_truncated_datagram_yields_the_whole_messages_before_the_cut() {
    let bytes = datagram(vec![up(ETH), default_via(AddressFamily::Inet, ETH)], 1);
    let cut = &bytes[..bytes.len() - 3];
    assert_eq!(messages_of(cut).len(), 1);
    assert!(messages_of(&bytes[..10]).is_empty());
}
