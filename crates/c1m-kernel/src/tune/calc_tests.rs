//! The calculator's formulas against hand-computed figures (24 GiB and 2 GiB boxes, 1M
//! connections, proxies, 64 KiB pages).

use super::*;

const GIB: u64 = 1 << 30;

fn host(mem: u64) -> Host {
    Host {
        mem_bytes: mem,
        cpus: 2,
        page_size: 4096,
        conntrack_loaded: true,
        obj: ObjSizes::MEASURED,
    }
}

fn target(conns: u64, role: Role) -> Target {
    Target {
        conns,
        role,
        buffered: 4096,
    }
}

#[test]
fn kernel_shape_matches_live_kernel() {
    // A live 6.18 box printed 287898 383866 575796 for limit 383866.
    assert_eq!(tcp_mem_shape(383_866), [287_898, 383_866, 575_796]);
}

#[test]
fn one_million_on_24_gib_server() {
    let h = host(24 * GIB);
    let t = target(1_000_000, Role::Server);
    let p = plan(h, t);
    // 24 GiB = 6291456 pages; kernel limit 6291456/16 = 393216.
    assert_eq!(p.math.tcp_mem_default, [294_912, 393_216, 589_824]);
    // 1e6 sockets × 4096 B / 4096 B = 1e6 pages of pressure; min 750000; max 1500000.
    assert_eq!(p.value("net.ipv4.tcp_mem"), Some("750000 1000000 1500000"));
    // 1e6 + 1024 = 1001024 → 2^20.
    assert_eq!(p.value("limits.nofile"), Some("1048576"));
    assert_eq!(p.value("systemd.LimitNOFILE"), Some("1048576"));
    assert_eq!(p.value("fs.nr_open"), Some("1048576"));
    // 25769803776 / 10240 = 2516582 > 1.25e6.
    assert_eq!(p.value("fs.file-max"), Some("2516582"));
    // Kernel default 25769803776 / 25 / 208 B per watch = 4955731 > 1.25e6.
    assert_eq!(p.value("fs.epoll.max_user_watches"), Some("4955731"));
    // 1e6 / 100 = 10000 → 16384.
    assert_eq!(p.value("net.core.somaxconn"), Some("16384"));
    // tcp_max_syn_backlog bounds nothing with syncookies on: not written.
    assert_eq!(p.value("net.ipv4.tcp_max_syn_backlog"), None);
    // Orphans: a quarter closing at once × the kernel's ×4 penalty = one per socket,
    // 2^20, but at most 12 % of RAM at 4014 B each: 3092376444 / 4014 = 770397.
    assert_eq!(p.value("net.ipv4.tcp_max_orphans"), Some("770397"));
    assert_eq!(p.value("net.ipv4.tcp_max_tw_buckets"), Some("1048576"));
    assert_eq!(p.value("net.netfilter.nf_conntrack_max"), Some("1250000"));
    // Buckets with it, or chains grow to max/buckets × 2 entries.
    assert_eq!(
        p.value("net.netfilter.nf_conntrack_buckets"),
        Some("1250000")
    );
    assert_eq!(p.value("net.ipv4.tcp_slow_start_after_idle"), Some("0"));
    assert_eq!(p.value("net.ipv4.tcp_syncookies"), Some("1"));
    // Server: no port range, no tw_reuse.
    assert_eq!(p.value("net.ipv4.ip_local_port_range"), None);
    assert_eq!(p.value("net.ipv4.tcp_tw_reuse"), None);
    // Usable = 24 GiB × 3/4 = 19327352832; / (3806 + 208) = 4814985; / 8110 = 2383150.
    assert_eq!(p.math.usable_bytes, 19_327_352_832);
    assert_eq!(p.math.capacity_idle, 4_814_985);
    assert_eq!(p.math.capacity_busy, 2_383_150);
    assert_eq!(p.math.kernel_bytes_total, 4_014_000_000);
    // Half of 24 GiB in pages: 12884901850 / 4096.
    assert_eq!(p.math.tcp_mem_cap, 3_145_727);
    assert!(p.math.fits);
    assert_eq!(p.math.fds_per_worker, 500_000);
    assert_eq!(p.math.source_ips_per_destination, None);
    assert_eq!(p.math.keepalive_probes_notes, 33_333);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}

#[test]
fn one_million_on_24_gib_client() {
    let p = plan(host(24 * GIB), target(1_000_000, Role::Client));
    assert_eq!(p.value("net.ipv4.ip_local_port_range"), Some("10000 65535"));
    assert_eq!(p.value("net.ipv4.tcp_tw_reuse"), Some("1"));
    // No listener: somaxconn, syn backlog and syncookies do not apply.
    assert_eq!(p.value("net.core.somaxconn"), None);
    assert_eq!(p.value("net.ipv4.tcp_max_syn_backlog"), None);
    assert_eq!(p.value("net.ipv4.tcp_syncookies"), None);
    // 45 % of 55536 ports = 24991 per (source, destination): 1e6 needs 41 source
    // addresses, not the 19 the full range would suggest (the connect() cliff is at half).
    assert_eq!(p.math.conns_per_source, Some(24_991));
    assert_eq!(p.math.source_ips_per_destination, Some(41));
    assert_eq!(p.value("net.ipv4.tcp_mem"), Some("750000 1000000 1500000"));
}

#[test]
fn proxy_doubles_sockets() {
    let p = plan(host(24 * GIB), target(1_000_000, Role::Proxy));
    assert_eq!(p.math.sockets, 2_000_000);
    // 2000000 + 1024 → 2^21; nr_open must follow it above the default.
    assert_eq!(p.value("limits.nofile"), Some("2097152"));
    assert_eq!(p.value("fs.nr_open"), Some("2097152"));
    // 2e6 pages of pressure would make max 3e6 pages, but 2e6 sockets' slab (8.0 GB)
    // leaves 11299352832 B of the usable 3/4: max ≤ 2758631 pages, shape rebuilt under it.
    assert_eq!(p.value("net.ipv4.tcp_mem"), Some("1379313 1839086 2758626"));
    // 8.0 GB slab + 8.2 GB buffered fits the 19.3 GB usable: only tcp_mem is capped.
    assert!(p.math.fits);
    assert!(p.math.tcp_mem_capped);
    assert!(
        p.warnings[0]
            .en
            .starts_with("tcp_mem is capped at 2758631 pages"),
        "{:?}",
        p.warnings
    );
    // 2e6 + 25 % = 2.5e6 is below the 2516582 default.
    assert_eq!(p.value("fs.file-max"), Some("2516582"));
    // Capacity per proxied connection: 19327352832 / 8028 = 2407492.
    assert_eq!(p.math.capacity_idle, 2_407_492);
    assert!(p.value("net.ipv4.ip_local_port_range").is_some());
    assert!(p.value("net.core.somaxconn").is_some());
}

#[test]
fn small_box_never_below_kernel_defaults_and_warns() {
    // 2 GiB, 10000 connections: every sized value stays at the kernel default.
    let h = host(2 * GIB);
    let p = plan(h, target(10_000, Role::Server));
    // 524288 pages / 16 = 32768.
    assert_eq!(p.value("net.ipv4.tcp_mem"), Some("24576 32768 49152"));
    assert_eq!(p.value("net.core.somaxconn"), Some("4096"));
    // 10000 / 100 = 100 → 128 arriving at once; the defaults cover it (syn backlog on
    // 2 GiB: max(128, 16384 slots / 128) = 128).
    assert_eq!(p.need("net.core.somaxconn"), Some("128"));
    // ehash 2 GiB / 128 KiB = 16384 slots: default orphans 8192; the target needs
    // 10000 → 16384 (a quarter closing at once, ×4 penalty).
    assert_eq!(p.value("net.ipv4.tcp_max_orphans"), Some("16384"));
    assert_eq!(p.need("net.ipv4.tcp_mem"), Some("7500 10000 15000"));
    assert_eq!(p.need("fs.file-max"), Some("12500"));
    assert_eq!(p.value("fs.nr_open"), Some("1048576"));
    // 10000 + 1024 → 16384.
    assert_eq!(p.value("limits.nofile"), Some("16384"));
    assert!(p.warnings.is_empty());

    // 2 GiB: nf_conntrack's default is 65536 buckets (1 to 4 GiB), not RAM/16384.
    assert_eq!(p.value("net.netfilter.nf_conntrack_buckets"), Some("65536"));
}

#[test]
fn two_gib_box_asking_for_one_million() {
    // The audit's case: 1M × 4 KiB buffered = 1e6 pages; the kernel shape would put max at
    // 1.5e6 pages = 5.7 GiB on a 2 GiB box. The cap keeps tcp_mem at the kernel's own
    // (the sockets' slab alone, 4 GB, is more than the 1.5 GiB usable) and says why.
    let h = host(2 * GIB);
    let p = plan(h, target(1_000_000, Role::Server));
    assert_eq!(p.value("net.ipv4.tcp_mem"), Some("24576 32768 49152"));
    assert_eq!(p.need("net.ipv4.tcp_mem"), Some("24576 32768 49152"));
    assert!(!p.math.fits);
    // 1610612736 / 4014 B.
    assert_eq!(p.math.capacity_idle, 401_248);
    let w = &p.warnings[0].en;
    assert!(
        w.starts_with("1000000 connections need ~7.55 GiB of kernel memory"),
        "{w}"
    );
    assert!(w.contains("this box has 2.00 GiB"), "{w}");
    let max_bytes = 49_152 * 4096;
    assert!(max_bytes <= h.mem_bytes / 2);
}

#[test]
fn tcp_mem_never_above_half_of_ram() {
    // 16 GiB, 1M with 16 KiB each: the shape wants max 6e6 pages (22.9 GiB). Half of
    // RAM is 2097151 pages; the shape is rebuilt under it.
    let mut t = target(1_000_000, Role::Server);
    t.buffered = 16 * 1024;
    let p = plan(host(16 * GIB), t);
    assert_eq!(p.math.tcp_mem_cap, 2_097_151);
    assert_eq!(p.value("net.ipv4.tcp_mem"), Some("1048575 1398100 2097150"));
    assert!(!p.math.fits);
    assert!(p.warnings[0].en.contains("need ~"), "{:?}", p.warnings);
}

#[test]
fn conntrack_default_follows_nf_conntrack_init_start() {
    assert_eq!(conntrack_buckets_default(64 << 20), 1024);
    assert_eq!(conntrack_buckets_default(512 << 20), 4096);
    assert_eq!(conntrack_buckets_default(GIB), 8192);
    assert_eq!(conntrack_buckets_default(2 * GIB), 65_536);
    assert_eq!(conntrack_buckets_default(4 * GIB), 65_536);
    assert_eq!(conntrack_buckets_default(8 * GIB), 262_144);
}

#[test]
fn tables_capped_by_ram() {
    // 10M TIME_WAIT buckets at 256 B = 2.6 GB: on 4 GiB at most 12 % of RAM.
    let p = plan(host(4 * GIB), target(10_000_000, Role::Server));
    let tw: u64 = p
        .value("net.ipv4.tcp_max_tw_buckets")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(tw, 4 * GIB / 100 * 12 / 256);
    assert!(tw * 256 <= 4 * GIB / 8);
}

#[test]
fn buffered_bytes_drive_tcp_mem() {
    let mut t = target(1_000_000, Role::Server);
    t.buffered = 16 * 1024;
    // 1e6 × 16384 B / 4096 B = 4e6 pages; min 3e6, max 6e6 pages = 22.9 GiB: more than
    // half of 24 GiB, so the max is cut to 3145727 pages and the plan warns.
    let p = plan(host(24 * GIB), t);
    assert_eq!(p.value("net.ipv4.tcp_mem"), Some("1572861 2097150 3145722"));
    // 19327352832 / (4014 + 16384) = 947512 connections with 16 KiB queued each.
    assert_eq!(p.math.capacity_busy, 947_512);
    assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
    // A kilobyte each fits.
    t.buffered = 1024;
    assert!(plan(host(24 * GIB), t).warnings.is_empty());
}

#[test]
fn nofile_stops_at_nr_open_max() {
    let p = plan(host(1 << 50), target(3_000_000_000, Role::Server));
    assert_eq!(p.value("limits.nofile"), Some("2147483584"));
    assert_eq!(p.value("fs.nr_open"), Some("2147483584"));
    assert!(p
        .warnings
        .iter()
        .any(|w| w.en.contains("no process can hold")));
}

#[test]
fn somaxconn_clamps() {
    assert_eq!(somaxconn(&target(100, Role::Server)), 4096);
    assert_eq!(somaxconn(&target(10_000_000, Role::Server)), 65535);
}

#[test]
fn page_size_scales_tcp_mem() {
    let mut h = host(24 * GIB);
    h.page_size = 65536;
    // 393216 pages of 64 KiB / 16 = 24576; need 1e6 × 4096 / 65536 = 62500 pages.
    assert_eq!(tcp_mem_default(&h), [18432, 24576, 36864]);
    assert_eq!(
        tcp_mem(&h, &target(1_000_000, Role::Server)),
        [46875, 62500, 93750]
    );
}

#[test]
fn conntrack_only_when_loaded() {
    let mut h = host(24 * GIB);
    h.conntrack_loaded = false;
    let p = plan(h, target(1_000_000, Role::Server));
    assert_eq!(p.value("net.netfilter.nf_conntrack_max"), None);
}
