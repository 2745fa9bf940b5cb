//! The table itself: data only. Every entry's `source` names where its numbers come from
//! (kernel file and function, commit, documentation page, or the measurement command); the
//! `seeds` field records what the Chinese field notes set, so `explain` can say why c1m
//! disagrees.
//!
//! `netns: true` marks the sysctls that exist and are writable in a network namespace other
//! than the host's (checked by listing /proc/sys under `unshare -n` on kernel 6.18): a
//! container with its own network sets those itself; everything else is the host's.
//!
//! Order matters: it is the order `--apply` writes in (fs.nr_open before anything that relies
//! on it, limits after the sysctls), and the order output lists keys in.

use super::{Compare, Harm, KernelDefault, Kind, Param, Role, Rule, Text, Unit, Verdict};

const fn t(en: &'static str, zh: &'static str) -> Text {
    Text { en, zh }
}

const NONE: Text = t("", "");
const CLIENTS: &[Role] = &[Role::Client, Role::Proxy];
const LISTENERS: &[Role] = &[Role::Server, Role::Proxy];

/// Defaults every entry starts from; each entry overrides what it knows.
const BASE: Param = Param {
    key: "",
    kind: Kind::Sysctl,
    unit: Unit::Other,
    verdict: Verdict::Ignore,
    roles: &[],
    rule: Rule::None,
    compare: Compare::None,
    harm: Harm::Never,
    default: KernelDefault::Unknown,
    fix: None,
    netns: false,
    added: None,
    removed: None,
    meaning: NONE,
    kernel_default: NONE,
    sizing: NONE,
    danger: NONE,
    why: NONE,
    seeds: "",
    source: "",
};

/// The knowledge base, in apply order.
pub static PARAMS: &[Param] = &[
    // ---- descriptors: nr_open first, it caps every RLIMIT_NOFILE ----
    Param {
        key: "fs.nr_open",
        unit: Unit::Descriptors,
        verdict: Verdict::NeverLower,
        rule: Rule::NrOpen,
        compare: Compare::AtLeast,
        default: KernelDefault::Fixed("1048576"),
        added: Some("2.6.25"),
        meaning: t(
            "Ceiling for any process's RLIMIT_NOFILE. Setting nofile above it fails: a limits.conf \
             nofile of 2000000 with nr_open 1048576 makes PAM refuse logins.",
            "单个进程 RLIMIT_NOFILE 的上限。nofile 设得比它大会失败：nr_open 为 1048576 时在 limits.conf \
             里写 nofile 2000000，PAM 会拒绝登录。",
        ),
        kernel_default: t(
            "1048576 (1024*1024), the value hard-coded before 2.6.25. systemd ≥ 240 as PID 1 raises it at boot to 1073741816: it first writes INT_MAX rounded down to 8, which the kernel refuses (its maximum is 2147483584), then halves it. Read the live value.",
            "1048576（1024*1024），即 2.6.25 之前写死的值。systemd ≥ 240 作为 PID 1 启动时会把它调到 1073741816：它先写入向下取整到 8 的 INT_MAX，被内核拒绝（内核上限是 2147483584），于是减半。要读取实际值。",
        ),
        sizing: t("At least the per-process nofile c1m recommends; never below the kernel default.", "不小于 c1m 推荐的每进程 nofile；不低于内核默认。"),
        danger: t(
            "Raise it BEFORE any nofile in limits.conf, limits.d, LimitNOFILE= or DefaultLimitNOFILE=: pam_limits' setrlimit() fails above it and the login is refused (seed 002 was locked out at 2M); a unit fails with status 205/LIMITS. c1m --check and doctor flag such a line as critical.",
            "必须先于 limits.conf、limits.d、LimitNOFILE= 或 DefaultLimitNOFILE= 里的 nofile 调大：超过它时 pam_limits 的 setrlimit() 失败，登录被拒绝（笔记 002 设 200 万时无法登录）；服务以 205/LIMITS 状态启动失败。c1m --check 和 doctor 会把这样的行标为严重问题。",
        ),
        why: t(
            "ceiling for per-process nofile; raised before the limits",
            "进程 nofile 的上限；要先于 limits 调大",
        ),
        seeds: "004: 12453500; 002 hit the 1048576 ceiling",
        source: "fs/file.c (sysctl_nr_open = 1024*1024; sysctl_nr_open_max = INT_MAX rounded down to BITS_PER_LONG = 2147483584); Documentation/admin-guide/sysctl/fs.rst nr_open; systemd src/core/main.c bump_file_max_and_nr_open() writes INT_MAX rounded to 8 (EINVAL: above the kernel max), halves it and lands on 1073741816; pam_limits(8): setrlimit() above nr_open fails and the session is refused",
        ..BASE
    },
    Param {
        key: "fs.file-max",
        unit: Unit::Descriptors,
        verdict: Verdict::NeverLower,
        rule: Rule::FileMax,
        compare: Compare::AtLeast,
        default: KernelDefault::FileMax,
        meaning: t(
            "System-wide limit on open file handles (sockets included); /proc/sys/fs/file-nr shows \
             allocated, 0, max. Over it the kernel logs \"VFS: file-max limit N reached\".",
            "全系统打开文件句柄（含 socket）的上限；/proc/sys/fs/file-nr 显示已分配、0、上限。超过时内核日志\
             出现 \"VFS: file-max limit N reached\"。",
        ),
        kernel_default: t("About 10 % of RAM counted in KiB (one handle per KiB of every 10 KiB), at least 8192; \
             systemd ≥ 240 may raise it to LONG_MAX at boot.", "约为内存的 10%（以 KiB 计，每 10 KiB 一个句柄），至少 8192；systemd ≥ 240 可能在启动时把它调到 LONG_MAX。"),
        sizing: t("Total descriptors for the target (1 per connection, 2 for a proxy) plus 25 % headroom, \
             never below the kernel default.", "目标所需的描述符总数（每连接 1 个，代理 2 个）再加 25% 余量，不低于内核默认。"),
        danger: t("Too low: accept()/connect() fail with ENFILE for every process.", "过低时所有进程的 accept()/connect() 都报 ENFILE。"),
        why: t("all descriptors on the box, with headroom", "全机文件句柄总数，留余量"),
        seeds: "000/001: 1048576; 004: 12553500",
        source: "fs/file_table.c files_maxfiles_init() (10 % of memory in KiB, at least NR_FILE 8192) and the \"VFS: file-max limit %lu reached\" message; Documentation/admin-guide/sysctl/fs.rst file-max",
        ..BASE
    },
    Param {
        key: "fs.epoll.max_user_watches",
        unit: Unit::Entries,
        verdict: Verdict::NeverLower,
        rule: Rule::EpollWatches,
        compare: Compare::AtLeast,
        default: KernelDefault::EpollWatches,
        added: Some("2.6.28"),
        meaning: t(
            "Most epoll registrations one user may hold across all its processes; each costs an epitem plus an eppoll_entry of kernel memory (the sizes come from /proc/slabinfo; 184 B measured on kernel 6.18 here).",
            "同一用户所有进程可注册的 epoll 监视总数；每个占一个 epitem 加一个 eppoll_entry 的内核内存（大小取自 /proc/slabinfo；本机 6.18 内核实测 184 B）。",
        ),
        kernel_default: t("4 % of low memory divided by the per-watch cost.", "低端内存的 4% 除以每个监视的开销。"),
        sizing: t("Total sockets plus 25 %, never below the kernel default.", "socket 总数加 25%，不低于内核默认。"),
        danger: t("Too low: epoll_ctl(ADD) fails with ENOSPC.", "过低时 epoll_ctl(ADD) 报 ENOSPC。"),
        why: t("one epoll watch per socket for the user", "每个 socket 一个 epoll 监视"),
        seeds: "(missed by the notes)",
        source: "fs/eventpoll.c eventpoll_init(): 4 % of low memory / EP_ITEM_COST (sizeof epitem + eppoll_entry); per-watch size read from /proc/slabinfo (eventpoll_epi, eventpoll_pwq) and measured with bench/object-sizes.sh",
        ..BASE
    },
    // ---- TCP memory ----
    Param {
        key: "net.ipv4.tcp_mem",
        unit: Unit::Pages,
        verdict: Verdict::NeverLower,
        rule: Rule::TcpMem,
        compare: Compare::AtLeast,
        default: KernelDefault::TcpMem,
        meaning: t(
            "Three numbers in PAGES (not bytes): min, pressure, max for memory all TCP sockets use \
             for queued data. Above pressure TCP shrinks buffers; above max new buffer allocations \
             fail (\"TCP: out of memory -- consider tuning tcp_mem\"). sockstat's mem is in the \
             same pages.",
            "三个值，单位是页（不是字节）：所有 TCP socket 排队数据可用内存的 min、pressure、max。超过 pressure \
             时 TCP 收缩缓冲；超过 max 时分配失败（\"TCP: out of memory -- consider tuning tcp_mem\"）。\
             /proc/net/sockstat 的 mem 也以页计。",
        ),
        kernel_default: t("limit = nr_free_buffer_pages/16 (about RAM/16); min = 3/4 of limit, pressure = limit, \
             max = 2 × min.", "limit = nr_free_buffer_pages/16（约为内存页数/16）；min = limit 的 3/4，pressure = limit，max = 2 × min。"),
        sizing: t(
            "pressure = max(kernel default, connections × sockets per connection × expected buffered bytes / page size), min = 3/4 of pressure, max = 2 × min (the kernel's own shape), and max never above 50 % of MemTotal: tcp_mem counts only queued data, so the sockets' own slab, the processes and the page cache must fit in the other half (the kernel's default max is 3/32, about 9 %). When the target needs more, c1m says the box cannot hold it instead of writing it. An idle socket holds no buffer.",
            "pressure = max（内核默认，连接数 × 每连接 socket 数 × 预计排队字节 / 页大小），min = pressure 的 3/4，max = 2 × min（与内核相同的比例），且 max 不超过 MemTotal 的 50%：tcp_mem 只统计排队数据，socket 自身的 slab、进程和页缓存要放进另一半（内核默认的 max 是内存的 3/32，约 9%）。目标需要更多时，c1m 直接说明这台机器装不下，而不是写入。空闲 socket 不占缓冲。",
        ),
        danger: t(
            "A max near or above RAM (the notes' 786432 2097152 3145728 is 3/8/12 GiB; 1M connections with a page each is 5.7 GiB) means memory pressure never starts before the OOM killer does: TCP takes the memory and the OOM killer takes processes.",
            "max 接近或超过内存时（笔记的 786432 2097152 3145728 是 3/8/12 GiB；100 万连接各排队一页就是 5.7 GiB），内存压力模式还没开始，OOM killer 就先动手：TCP 占走内存，OOM killer 杀掉进程。",
        ),
        why: t(
            "pages for buffered data at the target, never below the kernel's",
            "按目标连接的缓冲数据计算的页数，不低于内核默认",
        ),
        seeds: "000/001/002: 786432 2097152 3145728; 004: 94500000 915000000 927000000",
        source: "net/ipv4/tcp.c tcp_init_mem(): limit = nr_free_buffer_pages()/16, min = limit/4*3, max = 2*min; Documentation/networking/ip-sysctl.rst tcp_mem; the 50 % of MemTotal cap is c1m's (calc::TCP_MEM_RAM_SHARE): the sockets' own slab is not counted in tcp_mem and must fit in the other half",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_rmem",
        netns: true,
        unit: Unit::Bytes,
        verdict: Verdict::Inform,
        meaning: t(
            "Per-socket receive buffer bytes: min, default, max for autotuning. Setting SO_RCVBUF \
             disables autotuning for that socket.",
            "每个 socket 接收缓冲的 min、default、max（字节），供自动调节使用；设置 SO_RCVBUF 会关闭该 socket 的自动调节。",
        ),
        kernel_default: t("4096 131072 and a max scaled to RAM (6291456 on older kernels, 33554432 on 6.x).", "4096 131072，最大值随内存变化（旧内核 6291456，6.x 为 33554432）。"),
        sizing: t("Left at the default; c1m sizes tcp_mem instead.", "保持默认；c1m 改为计算 tcp_mem。"),
        danger: t(
            "A small default (4096) cuts memory only while data is buffered; idle sockets hold no \
             buffer either way, and it slows any bulk transfer.",
            "把 default 改成 4096 只在有数据排队时省内存；空闲 socket 本来就不占缓冲，却会拖慢大流量传输。",
        ),
        why: t("leave the default; idle sockets hold no buffer", "保持默认；空闲 socket 不占缓冲"),
        seeds: "000/001/002: 4096 4096 16777216; 004: 32768 699040 50331648",
        source: "Documentation/networking/ip-sysctl.rst tcp_rmem; net/ipv4/tcp.c tcp_init() scales the max with tcp_mem",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_wmem",
        netns: true,
        unit: Unit::Bytes,
        verdict: Verdict::Inform,
        meaning: t(
            "Per-socket send buffer bytes: min, default, max. Setting SO_SNDBUF disables autotuning \
             for that socket.",
            "每个 socket 发送缓冲的 min、default、max（字节）；设置 SO_SNDBUF 会关闭自动调节。",
        ),
        kernel_default: t("4096 16384 4194304 on current kernels.", "当前内核为 4096 16384 4194304。"),
        sizing: t("Left at the default; c1m sizes tcp_mem instead.", "保持默认；c1m 改为计算 tcp_mem。"),
        danger: t(
            "A small default cuts memory only while data is queued, and a broadcast to many slow \
             readers is what tcp_mem must cover anyway.",
            "调小只在有数据排队时省内存；向大量慢读者广播时真正要管的是 tcp_mem。",
        ),
        why: t("leave the default; idle sockets hold no buffer", "保持默认；空闲 socket 不占缓冲"),
        seeds: "000/001/002: 4096 4096 16777216; 004: 32768 131072 33554432",
        source: "Documentation/networking/ip-sysctl.rst tcp_wmem; net/ipv4/tcp.c tcp_init()",
        ..BASE
    },
    Param {
        key: "net.core.rmem_default",
        unit: Unit::Bytes,
        meaning: t(
            "Default receive buffer for non-TCP sockets (TCP uses tcp_rmem).",
            "非 TCP socket 的默认接收缓冲（TCP 用 tcp_rmem）。",
        ),
        kernel_default: t("212992.", "212992。"),
        danger: t("No effect on TCP connection counts.", "对 TCP 连接数没有影响。"),
        why: t("not used by TCP", "TCP 不用它"),
        seeds: "002: 262144; 004: 699040",
        source: "include/net/sock.h SK_RMEM_DEFAULT; Documentation/admin-guide/sysctl/net.rst rmem_default",
        ..BASE
    },
    Param {
        key: "net.core.wmem_default",
        unit: Unit::Bytes,
        meaning: t(
            "Default send buffer for non-TCP sockets (TCP uses tcp_wmem).",
            "非 TCP socket 的默认发送缓冲（TCP 用 tcp_wmem）。",
        ),
        kernel_default: t("212992.", "212992。"),
        danger: t("No effect on TCP connection counts.", "对 TCP 连接数没有影响。"),
        why: t("not used by TCP", "TCP 不用它"),
        seeds: "002: 262144; 004: 131072",
        source: "include/net/sock.h SK_WMEM_DEFAULT; Documentation/admin-guide/sysctl/net.rst wmem_default",
        ..BASE
    },
    Param {
        key: "net.core.rmem_max",
        unit: Unit::Bytes,
        meaning: t(
            "Cap on SO_RCVBUF a process may ask for; does not bound TCP autotuning.",
            "进程用 SO_RCVBUF 能申请的上限；不限制 TCP 自动调节。",
        ),
        kernel_default: t(
            "4194304 (4 MiB) on current kernels (read on 6.18 here); 212992 on older ones.",
            "当前内核为 4194304（4 MiB，本机 6.18 内核实测）；旧内核为 212992。",
        ),
        danger: t("No effect on holding idle connections.", "对保持空闲连接没有影响。"),
        why: t("caps SO_RCVBUF only", "只限制 SO_RCVBUF"),
        seeds: "002: 16777216; 004: 50331648",
        source: "measured: `cat /proc/sys/net/core/rmem_max /proc/sys/net/core/wmem_max` on kernel 6.18.44 here, 2026-11-23: 4194304 4194304; 212992 on older kernels (SK_RMEM_MAX/SK_WMEM_MAX, include/net/sock.h)",
        ..BASE
    },
    Param {
        key: "net.core.wmem_max",
        unit: Unit::Bytes,
        meaning: t(
            "Cap on SO_SNDBUF a process may ask for; does not bound TCP autotuning.",
            "进程用 SO_SNDBUF 能申请的上限；不限制 TCP 自动调节。",
        ),
        kernel_default: t(
            "4194304 (4 MiB) on current kernels (read on 6.18 here); 212992 on older ones.",
            "当前内核为 4194304（4 MiB，本机 6.18 内核实测）；旧内核为 212992。",
        ),
        danger: t("No effect on holding idle connections.", "对保持空闲连接没有影响。"),
        why: t("caps SO_SNDBUF only", "只限制 SO_SNDBUF"),
        seeds: "002: 16777216; 004: 33554432",
        source: "measured: `cat /proc/sys/net/core/rmem_max /proc/sys/net/core/wmem_max` on kernel 6.18.44 here, 2026-11-23: 4194304 4194304; 212992 on older kernels (SK_RMEM_MAX/SK_WMEM_MAX, include/net/sock.h)",
        ..BASE
    },
    // ---- accepting: queues for connection storms ----
    Param {
        key: "net.core.somaxconn",
        netns: true,
        unit: Unit::Sockets,
        verdict: Verdict::NeverLower,
        roles: LISTENERS,
        rule: Rule::Somaxconn,
        compare: Compare::AtLeast,
        default: KernelDefault::Fixed("4096"),
        meaning: t(
            "Cap on a listener's accept queue: the backlog passed to listen() is silently cut to it. \
             A full queue drops SYNs/ACKs and bumps ListenOverflows.",
            "监听 socket 全连接队列的上限：listen() 传入的 backlog 会被静默截断到它。队列满时丢弃握手并累加 ListenOverflows。",
        ),
        kernel_default: t("4096 since Linux 5.4 (128 before); 32-bit since 4.1.", "Linux 5.4 起为 4096（之前 128）；4.1 起为 32 位。"),
        sizing: t("Room for 1 % of the target arriving at once on one listener (a reconnect storm after \
             a restart), as a power of two between 4096 and 65535.", "按重连风暴估算：目标连接数的 1% 同时到达同一个监听 socket，取 2 的幂，范围 4096..65535。"),
        danger: t(
            "Too low: a reconnect storm overflows the accept queue and clients retry with \
             exponential backoff (1 s, 3 s, 7 s...).",
            "过低时重连风暴会溢出全连接队列，客户端按指数退避重试（1 s、3 s、7 s……）。",
        ),
        why: t("accept queue for reconnect storms", "应对重连风暴的全连接队列"),
        seeds: "000: 262144; 002: 2048; 004: 65535",
        source: "commit 19f92a030ca6 (net: increase SOMAXCONN to 4096, Linux 5.4); net/socket.c __sys_listen() cuts the backlog to somaxconn; TcpExt ListenOverflows (Documentation/networking/snmp_counter.rst)",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_max_syn_backlog",
        netns: true,
        unit: Unit::Sockets,
        verdict: Verdict::Inform,
        roles: LISTENERS,
        rule: Rule::None,
        compare: Compare::None,
        default: KernelDefault::EhashSynBacklog,
        meaning: t(
            "Read only when tcp_syncookies=0: then, once fewer than a quarter of its slots are free, SYNs from peers not yet proven alive are dropped. With syncookies on (the default) it bounds nothing: the SYN queue is full at the listener's backlog (min of listen()'s argument and somaxconn), and SYN cookies answer from there (TCPReqQFullDoCookies). Accept-queue overflow (ListenOverflows) is somaxconn and the listen backlog.",
            "只在 tcp_syncookies=0 时才被读取：此时空位少于四分之一后，丢弃尚未证明存活的对端发来的 SYN。开启 syncookies（默认）时它什么也不限制：SYN 队列在监听 socket 的 backlog（listen() 参数与 somaxconn 的较小者）处就满了，之后由 SYN cookie 应答（TCPReqQFullDoCookies）。全连接队列溢出（ListenOverflows）取决于 somaxconn 和 listen backlog。",
        ),
        kernel_default: t("max(128, TCP established hash entries / 128).", "max（128，TCP established 哈希表项数 / 128）。"),
        sizing: t(
            "Not written while syncookies are on. Size somaxconn and the server's listen() backlog for storms instead; only with tcp_syncookies=0 set it to at least the listen backlog.",
            "开启 syncookies 时不写入。应按风暴估算 somaxconn 和服务端的 listen() backlog；只有 tcp_syncookies=0 时才把它设为不小于 listen backlog。",
        ),
        danger: t(
            "Raising it (the notes' 8192...655360) changes nothing with syncookies on; turning syncookies off and relying on it drops SYNs in a storm.",
            "开启 syncookies 时调大它（笔记的 8192……655360）毫无作用；关闭 syncookies 而依赖它，风暴时会丢 SYN。",
        ),
        why: t(
            "bounds nothing while syncookies are on; somaxconn and the listen backlog do",
            "开启 syncookies 时不限制任何东西；起作用的是 somaxconn 和 listen backlog",
        ),
        seeds: "000: 8192; 002: 16384; 004: 655360",
        source: "net/ipv4/tcp_input.c tcp_conn_request(): the SYN queue is full when inet_csk_reqsk_queue_is_full(), i.e. at the listen backlog (sk_max_ack_backlog), and then cookies answer; sysctl_max_syn_backlog is read only when tcp_syncookies=0; default max(128, ehash/128) in tcp_ipv4.c tcp_sk_init()",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_syncookies",
        netns: true,
        unit: Unit::Switch,
        verdict: Verdict::Recommend,
        roles: LISTENERS,
        rule: Rule::Fixed("1"),
        compare: Compare::Exact,
        harm: Harm::Equals("0"),
        default: KernelDefault::Fixed("1"),
        meaning: t(
            "1: answer with SYN cookies when the SYN queue is full. A fallback, not capacity.",
            "1:SYN 队列满时用 SYN cookie 应答。是兜底，不是容量。",
        ),
        kernel_default: t("1.", "1。"),
        sizing: t("Keep 1.", "保持 1。"),
        danger: t("0 turns a full SYN queue into dropped connections.", "设为 0 时 SYN 队列满就直接丢连接。"),
        why: t("keep SYN cookies as the fallback", "保留 SYN cookie 兜底"),
        seeds: "004: 1",
        source: "Documentation/networking/ip-sysctl.rst tcp_syncookies; net/ipv4/tcp_input.c tcp_conn_request()",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_synack_retries",
        netns: true,
        unit: Unit::Other,
        meaning: t(
            "How many times a SYN-ACK is retransmitted for a half-open connection.",
            "半连接的 SYN-ACK 重传次数。",
        ),
        kernel_default: t("5 (last retransmission after 31 s, gives up after 63 s).", "5（最后一次重传在 31 秒后，63 秒后放弃）。"),
        danger: t(
            "Lowering it drops slow or lossy clients sooner; it does not add capacity.",
            "调低只会让慢速或丢包的客户端更早失败，不增加容量。",
        ),
        why: t("no effect on how many connections fit", "不影响能容纳的连接数"),
        seeds: "000: 3; 004: 2",
        source: "Documentation/networking/ip-sysctl.rst tcp_synack_retries",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_syn_retries",
        netns: true,
        unit: Unit::Other,
        meaning: t("How many times connect() retransmits a SYN.", "connect() 重传 SYN 的次数。"),
        kernel_default: t("6 (about 127 s).", "6（约 127 秒）。"),
        danger: t(
            "Lowering it makes clients give up sooner in a storm; no capacity effect.",
            "调低只会让客户端在风暴中更早放弃；不影响容量。",
        ),
        why: t("no effect on how many connections fit", "不影响能容纳的连接数"),
        seeds: "000: 3; 004: 2",
        source: "Documentation/networking/ip-sysctl.rst tcp_syn_retries",
        ..BASE
    },
    // ---- outgoing: ephemeral ports and TIME_WAIT ----
    Param {
        key: "net.ipv4.ip_local_port_range",
        netns: true,
        unit: Unit::Ports,
        verdict: Verdict::Recommend,
        roles: CLIENTS,
        rule: Rule::PortRange,
        compare: Compare::WiderRange,
        default: KernelDefault::Fixed("32768 60999"),
        meaning: t(
            "Ephemeral ports for outgoing connections (about 28K by default). The range is global, but a port is only busy per 4-tuple: each (source address, destination) pair can use the whole range. connect() gets slow long before the range is full: it scans ports of one parity first, and once that half is used every connect() walks it (measured here: 20-40 us below half of the range, 1-3 ms above). IP_BIND_ADDRESS_NO_PORT (Linux 4.2) makes bind() to a source address leave the port unchosen; connect() picks it once the destination is known, so one port can serve several destinations (distinct 4-tuples).",
            "向外连接使用的临时端口范围（默认约 2.8 万个）。范围是全局的，但端口只按四元组占用：每个（源地址，目的地址）组合都能用满整个范围。远在用满之前 connect() 就会变慢：内核先扫描同一奇偶性的端口，那一半用完后每次 connect() 都要把它走一遍（本机实测：用量低于一半时 20-40 微秒，超过一半后 1-3 毫秒）。IP_BIND_ADDRESS_NO_PORT（Linux 4.2）让 bind() 只绑定源地址、暂不选端口；等 connect() 知道目的地址后再选，于是同一端口可以用于多个目的地址（不同的四元组）。",
        ),
        kernel_default: t("32768 60999.", "32768 60999。"),
        sizing: t(
            "10000 65535 (55536 ports; ends of different parity as the kernel docs advise; ports below 10000 left to services). Plan for at most 45 % of the range per (source, destination) pair, under the cliff at half: more connections need more source addresses (c1m bench spreads over 127.0.0.x on loopback by the same rule).",
            "10000 65535（55536 个端口；按内核文档建议两端奇偶不同；10000 以下留给服务）。每个（源地址，目的地址）组合最多按范围的 45% 规划，低于一半处的性能悬崖：连接更多就要更多源地址（c1m bench 在回环上按同一规则分散到 127.0.0.x）。",
        ),
        danger: t(
            "Starting at 1024 (the notes) lets outgoing connections take ports services want to listen on (see ip_local_reserved_ports). Past half of the range per pair, connect() burns sys CPU in __inet_hash_connect (haproxy #579, #2050).",
            "从 1024 开始（笔记的写法）会让向外连接占用服务要监听的端口（参见 ip_local_reserved_ports）。每个组合用量超过一半后，connect() 会在 __inet_hash_connect 里消耗大量内核态 CPU（haproxy #579、#2050）。",
        ),
        why: t(
            "more ephemeral ports per source IP and destination",
            "每个源 IP、每个目的地址可用更多临时端口",
        ),
        seeds: "000/001/002: 1024 65535; 004: 15000 65000",
        source: "Documentation/networking/ip-sysctl.rst ip_local_port_range and IP_BIND_ADDRESS_NO_PORT (ip(7)); net/ipv4/inet_hashtables.c __inet_hash_connect() scans ports of one parity first, then the other; measured here with bench/connect-cliff.sh (docs/kernel.md): connect() p50 19-31 us up to 49 % of the range, 0.85-3.6 ms above",
        ..BASE
    },
    Param {
        key: "net.ipv4.ip_local_reserved_ports",
        netns: true,
        unit: Unit::Ports,
        verdict: Verdict::Inform,
        roles: LISTENERS,
        meaning: t(
            "Ports inside ip_local_port_range that connect() and bind(port 0) must never pick. A server whose listening port lies in the ephemeral range can find it taken by an outgoing connection when it restarts.",
            "ip_local_port_range 内 connect() 和 bind（端口 0）不得选用的端口。监听端口落在临时端口范围内的服务，重启时可能发现端口已被向外连接占用。",
        ),
        kernel_default: t(
            "Empty.",
            "空。",
        ),
        sizing: t(
            "Every listening port inside the ephemeral range (c1m doctor lists them): a comma-separated list, e.g. 8080,9000.",
            "临时端口范围内的每个监听端口（c1m doctor 会列出）：逗号分隔，例如 8080,9000。",
        ),
        danger: t(
            "Without it a restart of the server can fail with EADDRINUSE while a client holds the port.",
            "不设置时，客户端占着端口会让服务重启失败（EADDRINUSE）。",
        ),
        why: t(
            "keeps listening ports out of the ephemeral range",
            "把监听端口排除在临时端口之外",
        ),
        seeds: "(missed by the notes)",
        source: "Documentation/networking/ip-sysctl.rst ip_local_reserved_ports",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_tw_reuse",
        netns: true,
        unit: Unit::Switch,
        verdict: Verdict::Recommend,
        roles: CLIENTS,
        rule: Rule::Fixed("1"),
        compare: Compare::Exact,
        default: KernelDefault::Fixed("2"),
        meaning: t(
            "Lets connect() reuse a port held by a TIME_WAIT socket when timestamps prove it safe. \
             0 off, 1 global, 2 loopback only. Helps only outgoing connections.",
            "时间戳能证明安全时，允许 connect() 复用处于 TIME_WAIT 的端口。0 关闭，1 全局，2 仅回环。只对向外连接有用。",
        ),
        kernel_default: t("2 (loopback only).", "2（仅回环）。"),
        sizing: t("1 on load generators and proxies; servers leave it alone.", "压测端和代理设为 1；服务端不动。"),
        danger: t("No effect on a server's accepted connections.", "对服务端接受的连接没有作用。"),
        why: t("reuse TIME_WAIT ports for outgoing connections", "向外连接复用 TIME_WAIT 端口"),
        seeds: "000/002/004: 1",
        source: "Documentation/networking/ip-sysctl.rst tcp_tw_reuse",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_tw_recycle",
        unit: Unit::Switch,
        verdict: Verdict::Obsolete,
        harm: Harm::NotEquals("0"),
        fix: Some("0"),
        removed: Some("4.12"),
        meaning: t(
            "Removed in Linux 4.12 (commit 4396e46187ca). It dropped SYNs whose timestamps went \
             backwards: broken behind NAT, then for everyone once timestamps were randomised per \
             connection.",
            "已在 Linux 4.12 删除（commit 4396e46187ca）。它会丢弃时间戳倒退的 SYN：在 NAT 后面出错，\
             时间戳按连接随机化后对所有人都出错。",
        ),
        kernel_default: t("0 until 4.12; the file no longer exists.", "4.12 之前为 0；现在该文件已不存在。"),
        danger: t(
            "On old kernels it silently drops clients behind NAT; on current kernels a config line \
             setting it makes `sysctl -p` fail with an error.",
            "老内核上会静默丢弃 NAT 后面的客户端；新内核上配置文件里的这一行会让 `sysctl -p` 报错。",
        ),
        why: t("removed in 4.12; never write it", "4.12 已删除；不要再写"),
        seeds: "000/002/004: 1",
        source: "commit 4396e46187ca (tcp: remove tcp_tw_recycle, Linux 4.12)",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_max_tw_buckets",
        netns: true,
        unit: Unit::Sockets,
        verdict: Verdict::NeverLower,
        rule: Rule::MaxTwBuckets,
        compare: Compare::AtLeast,
        harm: Harm::BelowHalfDefault,
        default: KernelDefault::EhashHalf,
        meaning: t(
            "Most TIME_WAIT sockets held at once; over it, TIME_WAIT is skipped and the connection closes at once (TCPTimeWaitOverflow), losing TIME_WAIT's protection against stray segments. A TIME_WAIT socket is a tw_sock_TCP slab object (256 B on kernel 6.18; c1m reads the size from /proc/slabinfo).",
            "同时保留的 TIME_WAIT socket 上限；超过后直接跳过 TIME_WAIT（计入 TCPTimeWaitOverflow），失去对迷途报文的保护。每个 TIME_WAIT 是一个 tw_sock_TCP slab 对象（6.18 内核上 256 B；c1m 从 /proc/slabinfo 读取大小）。",
        ),
        kernel_default: t("Half the TCP established hash size (RAM-scaled).", "TCP established 哈希表大小的一半（随内存变化）。"),
        sizing: t(
            "At least one per socket of the target (rounded up to a power of two), never below the kernel default: 1M TIME_WAIT sockets cost about 256 MB.",
            "至少每个 socket 一个（向上取 2 的幂），不低于内核默认：100 万个 TIME_WAIT 约 256 MB。",
        ),
        danger: t(
            "5000 (the notes) is harmful: it throws away TIME_WAIT to save a few hundred KB.",
            "5000（笔记的写法）有害：为了省几百 KB 扔掉了 TIME_WAIT 保护。",
        ),
        why: t("TIME_WAIT sockets are cheap; never lower", "TIME_WAIT 很便宜；不要调低"),
        seeds: "000: 5000 (harmful); 004: 6000000",
        source: "Documentation/networking/ip-sysctl.rst tcp_max_tw_buckets; net/ipv4/tcp_ipv4.c tcp_sk_init() (ehash entries / 2); TcpExt TCPTimeWaitOverflow; TIME_WAIT size from /proc/slabinfo tw_sock_TCP (256 B on kernel 6.18 here)",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_max_orphans",
        unit: Unit::Sockets,
        verdict: Verdict::NeverLower,
        rule: Rule::MaxOrphans,
        compare: Compare::AtLeast,
        harm: Harm::BelowHalfDefault,
        default: KernelDefault::EhashHalf,
        meaning: t(
            "Most sockets closed by their process but still finishing (FIN_WAIT, LAST_ACK...). The kernel compares orphans × 1, 2 or 4 with it: the count is doubled when the peer kept its window shut for a long time or no reset is due, and doubled again after a soft ICMP error, so \"TCP: too many orphaned sockets\" can appear at a quarter of the limit; those orphans are reset. Each orphan may hold up to about 64 KB of queued data.",
            "进程已关闭但连接仍在收尾（FIN_WAIT、LAST_ACK……）的 socket 上限。内核拿孤儿数 × 1、2 或 4 和它比较：对端长时间关闭窗口或不需要复位时翻倍，收到软 ICMP 错误再翻倍，所以孤儿数到上限的四分之一时就可能出现 \"TCP: too many orphaned sockets\"，这些孤儿被复位。每个孤儿最多可占约 64 KB 排队数据。",
        ),
        kernel_default: t("Half the TCP established hash size (RAM-scaled).", "TCP established 哈希表大小的一半（随内存变化）。"),
        sizing: t(
            "Four times a quarter of the target's sockets closing at once (a peer restart), so the ×4 penalty still fits, rounded up to a power of two, never below the kernel default.",
            "按四分之一的 socket 同时关闭（对端重启）再乘 4，使 ×4 惩罚也放得下，向上取 2 的幂，不低于内核默认。",
        ),
        danger: t(
            "Lowering it resets connections mid-close. \"too many orphaned sockets\" is this limit; \"out of memory -- consider tuning tcp_mem\" is tcp_mem: different causes, different fixes.",
            "调低会在关闭过程中重置连接。\"too many orphaned sockets\" 对应这个上限；\"out of memory -- consider tuning tcp_mem\" 对应 tcp_mem：原因不同，修法也不同。",
        ),
        why: t("room for mass closes; never lower", "为批量关闭留余量；不要调低"),
        seeds: "002: 131072; 004: 3276800",
        source: "net/ipv4/tcp.c tcp_check_oom() and tcp_too_many_orphans() (orphans << shift > tcp_max_orphans); net/ipv4/tcp_timer.c tcp_out_of_resources() (shift +1 when the peer kept its window shut for 2*TCP_RTO_MAX or no reset is due, +1 after a soft ICMP error); default ehash/2 in tcp_init()",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_fin_timeout",
        netns: true,
        unit: Unit::Seconds,
        meaning: t(
            "How long an orphaned socket waits in FIN_WAIT_2. It does not change TIME_WAIT, which \
             is fixed at 60 s.",
            "孤儿 socket 在 FIN_WAIT_2 的等待时间。它不改变 TIME_WAIT（固定 60 秒）。",
        ),
        kernel_default: t("60.", "60。"),
        danger: t(
            "A low value changes little: only orphaned FIN_WAIT_2 sockets are affected.",
            "调低作用很小：只影响孤儿 FIN_WAIT_2。",
        ),
        why: t("affects only orphaned FIN_WAIT_2; not TIME_WAIT", "只影响孤儿 FIN_WAIT_2；与 TIME_WAIT 无关"),
        seeds: "000: 30; 002: 15; 004: 7",
        source: "Documentation/networking/ip-sysctl.rst tcp_fin_timeout; include/net/tcp.h TCP_TIMEWAIT_LEN (60 s)",
        ..BASE
    },
    // ---- idle connections ----
    Param {
        key: "net.ipv4.tcp_slow_start_after_idle",
        netns: true,
        unit: Unit::Switch,
        verdict: Verdict::Recommend,
        rule: Rule::Fixed("0"),
        compare: Compare::Exact,
        default: KernelDefault::Fixed("1"),
        meaning: t(
            "1: after an idle period longer than the RTO, the congestion window restarts from the \
             initial window (RFC 2861, now historic per RFC 7661).",
            "1：空闲超过 RTO 后，拥塞窗口从初始窗口重新开始（RFC 2861，RFC 7661 已将其列为历史）。",
        ),
        kernel_default: t("1.", "1。"),
        sizing: t("0 for long-lived connections that burst after idle (pushes).", "空闲后突发推送的长连接设为 0。"),
        danger: t(
            "With 1, every push after a quiet spell pays slow start again (seed 003's latency).",
            "为 1 时，每次安静后的推送都要重新慢启动（笔记 003 的延迟问题）。",
        ),
        why: t("pushes after idle keep their congestion window", "空闲后的推送保留拥塞窗口"),
        seeds: "003/004: 0",
        source: "RFC 2861, RFC 7661; Documentation/networking/ip-sysctl.rst tcp_slow_start_after_idle",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_keepalive_time",
        netns: true,
        unit: Unit::Seconds,
        verdict: Verdict::Inform,
        default: KernelDefault::Fixed("7200"),
        meaning: t(
            "Idle seconds before the first keepalive probe, only for sockets with SO_KEEPALIVE.",
            "开始发送保活探测前的空闲秒数，只对设置了 SO_KEEPALIVE 的 socket 生效。",
        ),
        kernel_default: t("7200 (2 hours).", "7200（2 小时）。"),
        sizing: t("Probes per second = sockets with SO_KEEPALIVE / keepalive_time: 1M sockets at 30 s is \
             about 33K probes/s. c1m serve uses application heartbeats, so leave it unless your \
             server relies on SO_KEEPALIVE, then size it from the probe rate you can afford.", "每秒探测数 = 设置了 SO_KEEPALIVE 的 socket 数 / keepalive_time:100 万个 socket 设 30 秒约每秒 3.3 万个探测。c1m serve 用应用层心跳，所以保持默认；若你的服务依赖 SO_KEEPALIVE，按能承受的探测速率来定。"),
        danger: t(
            "30 s on a million sockets is a constant packet storm.",
            "一百万个 socket 设 30 秒就是持续的报文风暴。",
        ),
        why: t("size from probes per second; not written", "按每秒探测数估算；不写入"),
        seeds: "000: 30; 004: 300",
        source: "Documentation/networking/ip-sysctl.rst tcp_keepalive_time; include/net/tcp.h TCP_KEEPALIVE_TIME",
        ..BASE
    },
    // ---- receive path ----
    Param {
        key: "net.ipv4.tcp_keepalive_intvl",
        netns: true,
        unit: Unit::Seconds,
        verdict: Verdict::Inform,
        default: KernelDefault::Fixed("75"),
        meaning: t(
            "Seconds between keepalive probes once tcp_keepalive_time has passed (SO_KEEPALIVE sockets only; TCP_KEEPINTVL per socket).",
            "tcp_keepalive_time 到期后两次保活探测之间的秒数（只对 SO_KEEPALIVE 的 socket；单个 socket 可用 TCP_KEEPINTVL）。",
        ),
        kernel_default: t(
            "75.",
            "75。",
        ),
        sizing: t(
            "A dead peer is noticed after keepalive_time + keepalive_intvl × keepalive_probes (7200 + 75 × 9 = 7875 s by default). c1m serve detects dead peers with its own heartbeats, so it is not written.",
            "死掉的对端在 keepalive_time + keepalive_intvl × keepalive_probes 之后才被发现（默认 7200 + 75 × 9 = 7875 秒）。c1m serve 用自己的心跳发现死连接，所以不写入。",
        ),
        danger: t(
            "Short intervals on a million sockets are a constant probe storm.",
            "一百万个 socket 用很短的间隔就是持续的探测风暴。",
        ),
        why: t(
            "dead-peer detection for SO_KEEPALIVE sockets",
            "SO_KEEPALIVE socket 的死连接检测",
        ),
        seeds: "(missed by the notes)",
        source: "Documentation/networking/ip-sysctl.rst tcp_keepalive_intvl; include/net/tcp.h TCP_KEEPALIVE_INTVL",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_keepalive_probes",
        netns: true,
        unit: Unit::Other,
        verdict: Verdict::Inform,
        default: KernelDefault::Fixed("9"),
        meaning: t(
            "Unanswered keepalive probes before the connection is dropped (TCP_KEEPCNT per socket).",
            "连接被丢弃前未获应答的保活探测次数（单个 socket 可用 TCP_KEEPCNT）。",
        ),
        kernel_default: t(
            "9.",
            "9。",
        ),
        sizing: t(
            "See tcp_keepalive_intvl.",
            "参见 tcp_keepalive_intvl。",
        ),
        danger: t(
            "Too few probes drop live peers on a lossy path.",
            "次数太少会在丢包路径上误杀活着的对端。",
        ),
        why: t(
            "dead-peer detection for SO_KEEPALIVE sockets",
            "SO_KEEPALIVE socket 的死连接检测",
        ),
        seeds: "(missed by the notes)",
        source: "Documentation/networking/ip-sysctl.rst tcp_keepalive_probes; include/net/tcp.h TCP_KEEPALIVE_PROBES",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_retries2",
        netns: true,
        unit: Unit::Other,
        verdict: Verdict::Inform,
        default: KernelDefault::Fixed("15"),
        meaning: t(
            "Retransmissions of unacknowledged data before the connection is dropped: what frees a socket whose peer vanished while data was in flight. 15 is about 924 s with exponential backoff capped at 120 s. TCP_USER_TIMEOUT on a socket replaces it with a time.",
            "未确认数据在连接被丢弃前的重传次数：对端在有数据未确认时消失，靠它释放 socket。15 次在指数退避（上限 120 秒）下约 924 秒。socket 上的 TCP_USER_TIMEOUT 会用一个时间取代它。",
        ),
        kernel_default: t(
            "15 (about 924.6 s).",
            "15（约 924.6 秒）。",
        ),
        sizing: t(
            "Keep at least 8 (about 102 s, the 100 s RFC 1122 asks for). For faster dead-peer detection set TCP_USER_TIMEOUT per socket rather than lowering it for the whole box.",
            "至少保持 8（约 102 秒，RFC 1122 要求的 100 秒）。想更快发现死连接，应对单个 socket 设置 TCP_USER_TIMEOUT，而不是为整机调低它。",
        ),
        danger: t(
            "Below 8 a short network outage kills healthy connections.",
            "低于 8 时短暂的网络中断就会断开健康的连接。",
        ),
        why: t(
            "frees sockets whose peer vanished with data in flight",
            "释放对端在数据未确认时消失的 socket",
        ),
        seeds: "(missed by the notes)",
        source: "Documentation/networking/ip-sysctl.rst tcp_retries2; net/ipv4/tcp_timer.c retransmits_timed_out() (TCP_RTO_MIN 200 ms doubling, capped at TCP_RTO_MAX 120 s); RFC 1122 4.2.3.5; tcp(7) TCP_USER_TIMEOUT",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_orphan_retries",
        netns: true,
        unit: Unit::Other,
        verdict: Verdict::Inform,
        default: KernelDefault::Fixed("0"),
        meaning: t(
            "Retransmissions before an orphaned socket (closed by its process) is killed. 0 means 8 for a peer that still answers (tcp_orphan_retries()), about 102 s of backoff.",
            "孤儿 socket（进程已关闭）被杀掉前的重传次数。0 表示对仍有应答的对端重试 8 次（tcp_orphan_retries()），约 102 秒退避。",
        ),
        kernel_default: t(
            "0 (meaning 8).",
            "0（即 8 次）。",
        ),
        sizing: t(
            "Lower it (e.g. 3, about 3 s) only when orphans crowd tcp_max_orphans after mass closes; c1m doctor says when.",
            "只有在批量关闭后孤儿挤满 tcp_max_orphans 时才调低（例如 3，约 3 秒）；c1m doctor 会指出何时需要。",
        ),
        danger: t(
            "Each orphan holds its socket and queued data for the whole retry time.",
            "每个孤儿在整个重试期间都占着 socket 和排队数据。",
        ),
        why: t(
            "how long orphans linger",
            "孤儿存活多久",
        ),
        seeds: "(missed by the notes)",
        source: "Documentation/networking/ip-sysctl.rst tcp_orphan_retries; net/ipv4/tcp_timer.c tcp_orphan_retries()",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_notsent_lowat",
        netns: true,
        unit: Unit::Bytes,
        verdict: Verdict::Inform,
        default: KernelDefault::Fixed("4294967295"),
        meaning: t(
            "Most unsent bytes a socket may hold before poll() stops reporting it writable (TCP_NOTSENT_LOWAT per socket). Unlimited by default, so a slow reader's unsent queue grows to the whole send buffer.",
            "socket 未发送字节超过多少后 poll() 不再报告可写（单个 socket 可用 TCP_NOTSENT_LOWAT）。默认不限，慢读者的未发送队列会涨满整个发送缓冲。",
        ),
        kernel_default: t(
            "4294967295 (unlimited).",
            "4294967295（不限）。",
        ),
        sizing: t(
            "16384 to 131072 bounds the memory a broadcast leaves queued on slow readers; below 4096 a writer wakes for every few hundred bytes.",
            "16384 到 131072 可以限制广播在慢读者上留下的排队内存；低于 4096 时写者每几百字节就被唤醒一次。",
        ),
        danger: t(
            "Set very low, sys CPU grows with the number of connections being written to.",
            "设得很低时，内核态 CPU 随被写入的连接数增长。",
        ),
        why: t(
            "bounds unsent bytes per socket",
            "限制每个 socket 的未发送字节",
        ),
        seeds: "(missed by the notes)",
        source: "Documentation/networking/ip-sysctl.rst tcp_notsent_lowat; commit c9bee3b7fdec (tcp: TCP_NOTSENT_LOWAT socket option, Linux 3.12)",
        ..BASE
    },
    Param {
        key: "net.core.netdev_max_backlog",
        unit: Unit::Packets,
        verdict: Verdict::Inform,
        default: KernelDefault::Fixed("1000"),
        meaning: t(
            "Per-CPU input queue of packets waiting for the stack. Drops show in /proc/net/softnet_stat \
             column 2 (column 3 counts time_squeeze).",
            "每个 CPU 等待协议栈处理的收包队列。丢包体现在 /proc/net/softnet_stat 第 2 列（第 3 列是 time_squeeze）。",
        ),
        kernel_default: t("1000.", "1000。"),
        sizing: t("Raise only when softnet_stat column 2 grows, doubling each time (c1m doctor watches it).", "只有 softnet_stat 第 2 列增长时才调大，每次翻倍（c1m doctor 会监视它）。"),
        danger: t(
            "2000000 (the notes) only hides a CPU that cannot keep up and adds latency.",
            "2000000（笔记的写法）只会掩盖 CPU 处理不过来的问题并增加延迟。",
        ),
        why: t("raise only when softnet drops grow", "只在 softnet 丢包增长时调大"),
        seeds: "002: 20000; 004: 2000000",
        source: "Documentation/admin-guide/sysctl/net.rst netdev_max_backlog; net/core/net-procfs.c softnet_seq_show() (softnet_stat columns)",
        ..BASE
    },
    Param {
        key: "net.ipv4.ip_no_pmtu_disc",
        netns: true,
        unit: Unit::Switch,
        verdict: Verdict::Harmful,
        harm: Harm::NotEquals("0"),
        default: KernelDefault::Fixed("0"),
        fix: Some("0"),
        meaning: t(
            "1 disables path MTU discovery: packets go out without DF and may fragment or vanish in \
             black holes.",
            "设为 1 会关闭路径 MTU 发现：报文不带 DF 发出，可能被分片或在黑洞中丢失。",
        ),
        kernel_default: t("0.", "0。"),
        sizing: t("Keep 0; use net.ipv4.tcp_mtu_probing=1 against PMTU black holes.", "保持 0；用 net.ipv4.tcp_mtu_probing=1 应对 PMTU 黑洞。"),
        danger: t(
            "1 (the notes) causes fragmentation and stalled connections; it adds no capacity.",
            "1（笔记的写法）会导致分片和连接卡死；不增加任何容量。",
        ),
        why: t("keep path MTU discovery on", "保持路径 MTU 发现"),
        seeds: "000: 1 (harmful)",
        source: "Documentation/networking/ip-sysctl.rst ip_no_pmtu_disc, tcp_mtu_probing",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_window_scaling",
        netns: true,
        unit: Unit::Switch,
        verdict: Verdict::Harmful,
        harm: Harm::Equals("0"),
        default: KernelDefault::Fixed("1"),
        fix: Some("1"),
        meaning: t(
            "RFC 1323 window scaling; 1 is the default and lets windows exceed 64 KB.",
            "RFC 1323 窗口扩大选项；默认 1，允许窗口超过 64 KB。",
        ),
        kernel_default: t("1.", "1。"),
        sizing: t("Keep 1 (the notes set 1, which is the default).", "保持 1（笔记设为 1，也就是默认值）。"),
        danger: t("0 caps every connection's window at 64 KB.", "设为 0 会把每个连接的窗口限制在 64 KB。"),
        why: t("keep window scaling on", "保持窗口扩大"),
        seeds: "004: 1 (the default)",
        source: "RFC 7323; Documentation/networking/ip-sysctl.rst tcp_window_scaling",
        ..BASE
    },
    Param {
        key: "net.ipv4.ip_nonlocal_bind",
        netns: true,
        unit: Unit::Switch,
        meaning: t(
            "Allows bind() to addresses not (yet) on the box, for failover VIPs.",
            "允许 bind() 到本机（尚）没有的地址，用于故障切换 VIP。",
        ),
        kernel_default: t("0.", "0。"),
        danger: t("No effect on connection capacity.", "不影响连接容量。"),
        why: t("for VIPs, not capacity", "用于 VIP，与容量无关"),
        seeds: "004: 1",
        source: "Documentation/networking/ip-sysctl.rst ip_nonlocal_bind",
        ..BASE
    },
    // ---- conntrack, only when the module is loaded ----
    Param {
        key: "net.netfilter.nf_conntrack_buckets",
        unit: Unit::Entries,
        verdict: Verdict::NeverLower,
        rule: Rule::ConntrackBuckets,
        compare: Compare::AtLeast,
        default: KernelDefault::Conntrack,
        meaning: t(
            "Size of the conntrack hash table (also /sys/module/nf_conntrack/parameters/hashsize). Each entry is hashed twice (original and reply direction), so with max = buckets an average chain holds two entries.",
            "conntrack 哈希表的桶数（也可写 /sys/module/nf_conntrack/parameters/hashsize）。每项按原方向和回复方向各哈希一次，max = 桶数时平均每条链两项。",
        ),
        kernel_default: t(
            "RAM / 131072 up to 1 GiB, 65536 from 1 to 4 GiB, 262144 above 4 GiB, at least 1024.",
            "1 GiB 以下为 内存 / 131072，1 到 4 GiB 为 65536，4 GiB 以上为 262144，至少 1024。",
        ),
        sizing: t(
            "Equal to the nf_conntrack_max c1m recommends (the kernel's own factor of one). Writable only in the initial network namespace.",
            "等于 c1m 推荐的 nf_conntrack_max（与内核默认的 1 倍比例相同）。只能在初始网络命名空间里写。",
        ),
        danger: t(
            "Raising nf_conntrack_max alone (the usual advice) keeps the old bucket count: chains grow to max/buckets × 2 entries and every packet of every connection walks them.",
            "只调大 nf_conntrack_max（常见建议）而桶数不变：链长变成 max/桶数 × 2，每个连接的每个包都要遍历。",
        ),
        why: t(
            "hash buckets raised with nf_conntrack_max",
            "哈希桶数随 nf_conntrack_max 一起调大",
        ),
        seeds: "(missed by the notes)",
        source: "net/netfilter/nf_conntrack_core.c nf_conntrack_init_start() (htable size from totalram, max_factor 1: \"keep the average hash chain length at 2 entries\"); Documentation/networking/nf_conntrack-sysctl.rst nf_conntrack_buckets",
        ..BASE
    },
    Param {
        key: "net.netfilter.nf_conntrack_max",
        unit: Unit::Entries,
        verdict: Verdict::NeverLower,
        rule: Rule::ConntrackMax,
        compare: Compare::AtLeast,
        default: KernelDefault::Conntrack,
        meaning: t(
            "Most connections netfilter tracks (one entry per connection, about 320 B each). A full \
             table logs \"nf_conntrack: table full, dropping packet\" and drops new connections. \
             Established entries time out after 5 days.",
            "netfilter 跟踪的连接上限（每个连接一项，约 320 B）。表满时日志 \"nf_conntrack: table full, dropping packet\" \
             并丢弃新连接。已建立连接的表项 5 天后才超时。",
        ),
        kernel_default: t(
            "= nf_conntrack_buckets: RAM / 131072 up to 1 GiB (RAM / 16384 bytes per bucket / 8 bytes per bucket head), 65536 from 1 to 4 GiB, 262144 above 4 GiB, at least 1024.",
            "= nf_conntrack_buckets：1 GiB 以下为 内存 / 131072（每 16384 字节内存分一个 8 字节桶头），1 到 4 GiB 为 65536，4 GiB 以上为 262144，至少 1024。",
        ),
        sizing: t(
            "Connections' sockets plus 25 %, never below the default, and nf_conntrack_buckets raised with it (one bucket per entry, the kernel's own ratio); only when conntrack is loaded (no /proc/sys/net/netfilter/nf_conntrack_max means nothing to do). Or exempt the port with a NOTRACK rule.",
            "连接的 socket 数加 25%，不低于默认，并同时调大 nf_conntrack_buckets（每项一个桶，与内核默认比例相同）；只在加载了 conntrack 时（没有 /proc/sys/net/netfilter/nf_conntrack_max 就无需处理）。也可以用 NOTRACK 规则豁免该端口。",
        ),
        danger: t(
            "The notes never mention it; a loaded conntrack caps a box at 65536 tracked connections up to 4 GiB of RAM and 262144 above. Raising the max alone leaves the buckets where they were and makes every lookup walk long chains.",
            "笔记从未提到它；加载了 conntrack 时，4 GiB 以下内存的机器最多跟踪 65536 个连接，以上为 262144 个。只调大上限而不调桶数，每次查找都要遍历很长的链。",
        ),
        why: t("one conntrack entry per connection", "每个连接一个 conntrack 表项"),
        seeds: "(missed by the notes)",
        source: "net/netfilter/nf_conntrack_core.c nf_conntrack_init_start() (max = buckets, max_factor 1) and the \"table full, dropping packet\" message; Documentation/networking/nf_conntrack-sysctl.rst; entry size from /proc/slabinfo nf_conntrack (256 B on kernel 6.18 here)",
        ..BASE
    },
    // ---- memory management, not networking ----
    Param {
        key: "vm.swappiness",
        unit: Unit::Other,
        verdict: Verdict::Inform,
        harm: Harm::Never,
        default: KernelDefault::Fixed("60"),
        fix: None,
        meaning: t(
            "How eagerly the kernel swaps anonymous memory versus dropping page cache.",
            "内核换出匿名内存与回收页缓存之间的倾向。",
        ),
        kernel_default: t("60.", "60。"),
        sizing: t(
            "Not c1m's business: c1m never writes or repairs it. A note only: on some 3.x kernels 0 meant \"never swap\" and OOM-killed hosts under pressure.",
            "不归 c1m 管：c1m 从不写入也不修复它。仅作提示：在部分 3.x 内核上 0 意味着“绝不换出”，内存紧张时会触发 OOM 杀进程。",
        ),
        danger: t(
            "Nothing c1m measures depends on it; it is listed only because the notes set it to 0.",
            "c1m 衡量的东西都与它无关；列出它只是因为笔记把它设成了 0。",
        ),
        why: t(
            "not c1m's business; a note only",
            "不归 c1m 管；仅作提示",
        ),
        seeds: "004: 0 (harmful)",
        source: "Documentation/admin-guide/sysctl/vm.rst swappiness",
        ..BASE
    },
    Param {
        key: "kernel.msgmnb",
        meaning: t("Bytes in one SysV message queue.", "单个 SysV 消息队列的字节数。"),
        kernel_default: t("16384.", "16384。"),
        danger: t("SysV message queues have no effect on TCP.", "SysV 消息队列与 TCP 无关。"),
        why: t("SysV IPC; no effect on TCP", "SysV IPC；与 TCP 无关"),
        seeds: "000: 655360",
        source: "Documentation/admin-guide/sysctl/kernel.rst msgmnb",
        ..BASE
    },
    Param {
        key: "kernel.msgmax",
        meaning: t("Largest SysV message.", "SysV 单条消息的最大字节数。"),
        kernel_default: t("8192.", "8192。"),
        danger: t("SysV message queues have no effect on TCP.", "SysV 消息队列与 TCP 无关。"),
        why: t("SysV IPC; no effect on TCP", "SysV IPC；与 TCP 无关"),
        seeds: "000: 655360; 004: 65536",
        source: "Documentation/admin-guide/sysctl/kernel.rst msgmax",
        ..BASE
    },
    Param {
        key: "kernel.shmmax",
        meaning: t("Largest SysV shared memory segment.", "SysV 共享内存段的最大字节数。"),
        kernel_default: t("Effectively unlimited on current kernels.", "当前内核上实际不限。"),
        danger: t("No effect on TCP.", "与 TCP 无关。"),
        why: t("SysV IPC; no effect on TCP", "SysV IPC；与 TCP 无关"),
        seeds: "004: 68719476736",
        source: "Documentation/admin-guide/sysctl/kernel.rst shmmax",
        ..BASE
    },
    Param {
        key: "kernel.shmall",
        meaning: t("Total SysV shared memory pages.", "SysV 共享内存总页数。"),
        kernel_default: t("Effectively unlimited on current kernels.", "当前内核上实际不限。"),
        danger: t("No effect on TCP.", "与 TCP 无关。"),
        why: t("SysV IPC; no effect on TCP", "SysV IPC；与 TCP 无关"),
        seeds: "004: 4294967296",
        source: "Documentation/admin-guide/sysctl/kernel.rst shmall",
        ..BASE
    },
    Param {
        key: "kernel.sysrq",
        meaning: t("Which magic SysRq key functions are allowed.", "允许哪些 SysRq 魔术键功能。"),
        kernel_default: t("Distribution-set (often 16 or 176).", "由发行版设定（常见 16 或 176）。"),
        danger: t("Not networking.", "与网络无关。"),
        why: t("not networking", "与网络无关"),
        seeds: "000: 1; 004: 0",
        source: "Documentation/admin-guide/sysrq.rst",
        ..BASE
    },
    // ---- per-process limits: after the sysctls that cap them ----
    Param {
        key: "limits.nofile",
        kind: Kind::Limits,
        unit: Unit::Descriptors,
        verdict: Verdict::Recommend,
        rule: Rule::Nofile,
        compare: Compare::AtLeast,
        meaning: t(
            "pam_limits' nofile (soft and hard RLIMIT_NOFILE) applied when a PAM session opens (login, sshd, su with pam_limits in the session stack); services started by systemd never read limits.conf or limits.d. A line for a user wins over @group lines, which win over `*`, and `*` does not match root, so root needs its own lines. A value above fs.nr_open makes setrlimit() fail and pam_limits refuses the login.",
            "pam_limits 的 nofile（软、硬 RLIMIT_NOFILE），在 PAM 会话打开时生效（login、sshd、会话栈里有 pam_limits 的 su）；systemd 启动的服务不读 limits.conf 和 limits.d。针对用户的行优先于 @组 的行，后者又优先于 `*`，而 `*` 不匹配 root，所以 root 需要单独的行。超过 fs.nr_open 的值会让 setrlimit() 失败，pam_limits 拒绝登录。",
        ),
        kernel_default: t("Soft 1024; hard 524288 under systemd ≥ 240 (4096 before).", "软限制 1024；systemd ≥ 240 下硬限制 524288（之前 4096）。"),
        sizing: t("The next power of two at or above the descriptors one process may hold (all of the \
             target plus a 1024 reserve), so a single-process server fits too. Must not exceed \
             fs.nr_open.", "不小于单个进程可能持有的描述符数（全部目标连接加 1024 预留）的下一个 2 的幂，单进程服务也能容纳。不得超过 fs.nr_open。"),
        danger: t(
            "Above fs.nr_open, logins fail (seed 002). Appending to limits.conf (the notes) mixes \
             c1m's lines with the distribution's; a drop-in can be removed cleanly.",
            "超过 fs.nr_open 时无法登录（笔记 002）。往 limits.conf 追加（笔记的写法）会和发行版的配置混在一起；drop-in 可以干净地删除。",
        ),
        why: t("descriptors for one process at the target", "一个进程承载目标连接所需的描述符"),
        seeds: "000/001: * - nofile 1048576; 002: 2000000; 004: 10000000",
        source: "limits.conf(5) and pam_limits(8): user lines win over @group lines, which win over `*`; `*` does not apply to root; when setrlimit() fails (a value above fs.nr_open) pam_limits fails the session and the login is refused; fs/file.c caps RLIMIT_NOFILE at nr_open",
        ..BASE
    },
    Param {
        key: "systemd.LimitNOFILE",
        kind: Kind::Systemd,
        unit: Unit::Descriptors,
        verdict: Verdict::Recommend,
        rule: Rule::Nofile,
        compare: Compare::AtLeast,
        added: Some("systemd 240"),
        meaning: t(
            "RLIMIT_NOFILE for a systemd service, set in a drop-in \
             /etc/systemd/system/UNIT.service.d/*.conf under [Service].",
            "systemd 服务的 RLIMIT_NOFILE，在 /etc/systemd/system/UNIT.service.d/*.conf 的 [Service] 段设置。",
        ),
        kernel_default: t("Soft 1024, hard 524288 (systemd ≥ 240).", "软 1024，硬 524288(systemd ≥ 240)。"),
        sizing: t("The same value as limits.nofile.", "与 limits.nofile 相同。"),
        danger: t(
            "Forgetting it is the usual reason a tuned box still stops at 1024 or 524288 \
             descriptors: services do not read limits.d.",
            "忘了它是调优后服务仍卡在 1024 或 524288 个描述符的常见原因：服务不读 limits.d。",
        ),
        why: t("services do not read limits.d", "服务不读 limits.d"),
        seeds: "(missed by the notes)",
        source: "systemd.exec(5) LimitNOFILE=; systemd 240 NEWS (default soft 1024, hard 524288); a value above fs.nr_open makes setrlimit() fail and the unit fails with status 205/LIMITS",
        ..BASE
    },
    // ---- set with other tools ----
    Param {
        key: "systemd.DefaultLimitNOFILE",
        kind: Kind::Systemd,
        unit: Unit::Descriptors,
        verdict: Verdict::Inform,
        meaning: t(
            "The RLIMIT_NOFILE every systemd unit gets unless it sets LimitNOFILE= (/etc/systemd/system.conf and system.conf.d/*.conf; user.conf for user managers).",
            "所有未设置 LimitNOFILE= 的 systemd 单元得到的 RLIMIT_NOFILE（/etc/systemd/system.conf 和 system.conf.d/*.conf；用户实例读 user.conf）。",
        ),
        kernel_default: t(
            "Soft 1024, hard 524288 (systemd ≥ 240).",
            "软 1024，硬 524288（systemd ≥ 240）。",
        ),
        sizing: t(
            "Leave it; give the one service that holds connections its own LimitNOFILE=. Never above fs.nr_open.",
            "保持不动；只给承载连接的那个服务单独设置 LimitNOFILE=。不得超过 fs.nr_open。",
        ),
        danger: t(
            "Above fs.nr_open every unit without its own LimitNOFILE= fails to start (status 205/LIMITS).",
            "超过 fs.nr_open 时，所有没有单独设置 LimitNOFILE= 的单元都无法启动（205/LIMITS）。",
        ),
        why: t(
            "default for every unit; checked against fs.nr_open",
            "所有单元的默认值；对照 fs.nr_open 检查",
        ),
        seeds: "(missed by the notes)",
        source: "systemd-system.conf(5) DefaultLimitNOFILE=; systemd 240 NEWS; setrlimit() above fs.nr_open fails (fs/file.c)",
        ..BASE
    },
    Param {
        key: "route.initcwnd",
        kind: Kind::Other,
        unit: Unit::Segments,
        verdict: Verdict::Inform,
        default: KernelDefault::Fixed("10"),
        meaning: t(
            "Initial congestion window of a route (`ip route change ... initcwnd N`); also the \
             restart window after idle when tcp_slow_start_after_idle=1.",
            "路由的初始拥塞窗口（`ip route change ... initcwnd N`）；tcp_slow_start_after_idle=1 时也是空闲后的重启窗口。",
        ),
        kernel_default: t("10 segments (RFC 6928).", "10 个报文段（RFC 6928）。"),
        sizing: t("Informational; tcp_slow_start_after_idle=0 matters more for pushes.", "仅供参考；对推送来说 tcp_slow_start_after_idle=0 更重要。"),
        danger: t("Large values burst into shallow buffers.", "过大时会向浅缓冲突发。"),
        why: t("informational", "仅供参考"),
        seeds: "003 (discussed)",
        source: "RFC 6928; ip-route(8) initcwnd",
        ..BASE
    },
    Param {
        key: "boot.thash_entries",
        kind: Kind::Other,
        unit: Unit::Entries,
        verdict: Verdict::Inform,
        meaning: t(
            "Kernel boot parameter: slots of the TCP established hash table. Without it the kernel sizes the table from RAM (one slot per 128 KiB) and caps it at 524288 slots, so 10M connections average about 19 sockets per chain on every packet's lookup.",
            "内核启动参数：TCP established 哈希表的槽数。不设置时内核按内存确定（每 128 KiB 一个槽），上限 524288，所以 1000 万连接时每个包的查找平均要走约 19 个 socket 的链。",
        ),
        kernel_default: t(
            "RAM / 128 KiB rounded to a power of two, at most 524288 (the boot log prints \"TCP established hash table entries: N\").",
            "内存 / 128 KiB 取 2 的幂，最多 524288（启动日志打印 \"TCP established hash table entries: N\"）。",
        ),
        sizing: t(
            "Above about 4 connections per slot, boot with thash_entries= the next power of two at or above the target (c1m doctor prints the exact GRUB line).",
            "每槽超过约 4 个连接时，用不小于目标的 2 的幂作为 thash_entries= 启动（c1m doctor 给出具体的 GRUB 命令）。",
        ),
        danger: t(
            "Long chains cost CPU on every received segment; a boot parameter cannot be changed at run time.",
            "链过长会让每个收到的报文都多耗 CPU；启动参数无法在运行时修改。",
        ),
        why: t(
            "established-hash size for 10M connections; boot parameter",
            "1000 万连接所需的 established 哈希大小；启动参数",
        ),
        seeds: "(missed by the notes)",
        source: "net/ipv4/tcp.c tcp_init(): alloc_large_system_hash(\"TCP established\", ..., thash_entries, 17, ..., thash_entries ? 0 : 512 * 1024); Documentation/admin-guide/kernel-parameters.txt thash_entries",
        ..BASE
    },
    Param {
        key: "nic.rings",
        kind: Kind::Other,
        unit: Unit::Packets,
        verdict: Verdict::Inform,
        meaning: t(
            "NIC receive/transmit ring sizes (`ethtool -g IFACE` to read, `ethtool -G` to set); \
             with RPS/RFS spreading receive work over CPUs.",
            "网卡收发环大小（`ethtool -g IFACE` 查看，`ethtool -G` 设置）；配合 RPS/RFS 把收包分散到多个 CPU。",
        ),
        kernel_default: t("Driver-specific; often below the hardware maximum.", "取决于驱动；常低于硬件上限。"),
        sizing: t("Raise to the hardware maximum when the NIC reports rx drops.", "网卡报告接收丢包时调到硬件上限。"),
        danger: t("Not visible in sysctls; drops hide in `ethtool -S`.", "不在 sysctl 里；丢包藏在 `ethtool -S`。"),
        why: t("informational", "仅供参考"),
        seeds: "(missed by the notes)",
        source: "ethtool(8) -g, -G, -S; Documentation/ABI/testing/sysfs-class-net-statistics (rx_dropped, rx_missed_errors, rx_fifo_errors, rx_over_errors)",
        ..BASE
    },
];
