//! The table itself: data only. Facts come from ../shared/kernel-facts.md (kernel docs
//! ip-sysctl.rst, sysctl/fs.rst, net/ipv4/tcp.c, nf_conntrack-sysctl.rst); the `seeds` field
//! records what the Chinese field notes set, so `explain` can say why c1m disagrees.
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
    added: None,
    removed: None,
    meaning: NONE,
    kernel_default: NONE,
    sizing: NONE,
    danger: NONE,
    why: NONE,
    seeds: "",
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
            "单个进程 RLIMIT_NOFILE 的上限。nofile 设得比它大会失败:nr_open 为 1048576 时在 limits.conf \
             里写 nofile 2000000,PAM 会拒绝登录。",
        ),
        kernel_default: t(
            "1048576 (1024*1024), the value hard-coded before 2.6.25. systemd ≥ 240 as PID 1 \
             raises it to the kernel maximum at boot (build option), so read the live value.",
            "1048576(1024*1024),即 2.6.25 之前写死的值。systemd ≥ 240 作为 PID 1 启动时会把它调到内核上限\
             (编译选项),所以要读取实际值。",
        ),
        sizing: t("At least the per-process nofile c1m recommends; never below the kernel default.", "不小于 c1m 推荐的每进程 nofile;不低于内核默认。"),
        danger: t(
            "Raise it BEFORE raising nofile in limits.d or LimitNOFILE=, or logins and services fail \
             to start (seed 002 was locked out at 2M).",
            "必须先于 limits.d 的 nofile 或 LimitNOFILE= 调大,否则登录和服务会启动失败(笔记 002 设 200 万时无法登录)。",
        ),
        why: t(
            "ceiling for per-process nofile; raised before the limits",
            "进程 nofile 的上限;要先于 limits 调大",
        ),
        seeds: "004: 12453500; 002 hit the 1048576 ceiling",
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
            "全系统打开文件句柄(含 socket)的上限;/proc/sys/fs/file-nr 显示已分配、0、上限。超过时内核日志\
             出现 \"VFS: file-max limit N reached\"。",
        ),
        kernel_default: t("About 10 % of RAM counted in KiB (one handle per KiB of every 10 KiB), at least 8192; \
             systemd ≥ 240 may raise it to LONG_MAX at boot.", "约为内存的 10%(以 KiB 计,每 10 KiB 一个句柄),至少 8192;systemd ≥ 240 可能在启动时把它调到 LONG_MAX。"),
        sizing: t("Total descriptors for the target (1 per connection, 2 for a proxy) plus 25 % headroom, \
             never below the kernel default.", "目标所需的描述符总数(每连接 1 个,代理 2 个)再加 25% 余量,不低于内核默认。"),
        danger: t("Too low: accept()/connect() fail with ENFILE for every process.", "过低时所有进程的 accept()/connect() 都报 ENFILE。"),
        why: t("all descriptors on the box, with headroom", "全机文件句柄总数,留余量"),
        seeds: "000/001: 1048576; 004: 12553500",
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
            "Most epoll registrations one user may hold across all its processes; each costs about \
             160 B of kernel memory.",
            "同一用户所有进程可注册的 epoll 监视总数;每个约占 160 B 内核内存。",
        ),
        kernel_default: t("4 % of low memory divided by the per-watch cost.", "低端内存的 4% 除以每个监视的开销。"),
        sizing: t("Total sockets plus 25 %, never below the kernel default.", "socket 总数加 25%,不低于内核默认。"),
        danger: t("Too low: epoll_ctl(ADD) fails with ENOSPC.", "过低时 epoll_ctl(ADD) 报 ENOSPC。"),
        why: t("one epoll watch per socket for the user", "每个 socket 一个 epoll 监视"),
        seeds: "(missed by the notes)",
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
            "三个值,单位是页(不是字节):所有 TCP socket 排队数据可用内存的 min、pressure、max。超过 pressure \
             时 TCP 收缩缓冲;超过 max 时分配失败(\"TCP: out of memory -- consider tuning tcp_mem\")。\
             /proc/net/sockstat 的 mem 也以页计。",
        ),
        kernel_default: t("limit = nr_free_buffer_pages/16 (about RAM/16); min = 3/4 of limit, pressure = limit, \
             max = 2 × min.", "limit = nr_free_buffer_pages/16(约为内存页数/16);min = limit 的 3/4,pressure = limit,max = 2 × min。"),
        sizing: t("pressure = max(kernel default, connections × sockets per connection × expected \
             buffered bytes / page size); min = 3/4 of pressure, max = 2 × min (the kernel's own \
             shape). An idle socket holds no buffer, so idle connections cost tcp_mem nothing.", "pressure = max(内核默认, 连接数 × 每连接 socket 数 × 预计排队字节 / 页大小);min = pressure 的 3/4,max = 2 × min(与内核相同的比例)。空闲 socket 不占缓冲,所以空闲连接不消耗 tcp_mem。"),
        danger: t(
            "The notes' 786432 2097152 3145728 is 3/8/12 GiB with 4 KiB pages, fine on big boxes \
             but more than the RAM of a small one; copied to a box with less RAM it lets TCP eat \
             memory the OOM killer then takes from processes.",
            "笔记里的 786432 2097152 3145728 在 4 KiB 页时是 3/8/12 GiB,小内存机器照抄会让 TCP 吃掉内存,\
             最后由 OOM killer 杀进程。",
        ),
        why: t(
            "pages for buffered data at the target, never below the kernel's",
            "按目标连接的缓冲数据计算的页数,不低于内核默认",
        ),
        seeds: "000/001/002: 786432 2097152 3145728; 004: 94500000 915000000 927000000",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_rmem",
        unit: Unit::Bytes,
        verdict: Verdict::Inform,
        meaning: t(
            "Per-socket receive buffer bytes: min, default, max for autotuning. Setting SO_RCVBUF \
             disables autotuning for that socket.",
            "每个 socket 接收缓冲的 min、default、max(字节),供自动调节使用;设置 SO_RCVBUF 会关闭该 socket 的自动调节。",
        ),
        kernel_default: t("4096 131072 and a max scaled to RAM (6291456 on older kernels, 33554432 on 6.x).", ""),
        sizing: t("Left at the default; c1m sizes tcp_mem instead.", "保持默认;c1m 改为计算 tcp_mem。"),
        danger: t(
            "A small default (4096) cuts memory only while data is buffered; idle sockets hold no \
             buffer either way, and it slows any bulk transfer.",
            "把 default 改成 4096 只在有数据排队时省内存;空闲 socket 本来就不占缓冲,却会拖慢大流量传输。",
        ),
        why: t("leave the default; idle sockets hold no buffer", "保持默认;空闲 socket 不占缓冲"),
        seeds: "000/001/002: 4096 4096 16777216; 004: 32768 699040 50331648",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_wmem",
        unit: Unit::Bytes,
        verdict: Verdict::Inform,
        meaning: t(
            "Per-socket send buffer bytes: min, default, max. Setting SO_SNDBUF disables autotuning \
             for that socket.",
            "每个 socket 发送缓冲的 min、default、max(字节);设置 SO_SNDBUF 会关闭自动调节。",
        ),
        kernel_default: t("4096 16384 4194304 on current kernels.", ""),
        sizing: t("Left at the default; c1m sizes tcp_mem instead.", "保持默认;c1m 改为计算 tcp_mem。"),
        danger: t(
            "A small default cuts memory only while data is queued, and a broadcast to many slow \
             readers is what tcp_mem must cover anyway.",
            "调小只在有数据排队时省内存;向大量慢读者广播时真正要管的是 tcp_mem。",
        ),
        why: t("leave the default; idle sockets hold no buffer", "保持默认;空闲 socket 不占缓冲"),
        seeds: "000/001/002: 4096 4096 16777216; 004: 32768 131072 33554432",
        ..BASE
    },
    Param {
        key: "net.core.rmem_default",
        unit: Unit::Bytes,
        meaning: t(
            "Default receive buffer for non-TCP sockets (TCP uses tcp_rmem).",
            "非 TCP socket 的默认接收缓冲(TCP 用 tcp_rmem)。",
        ),
        kernel_default: t("212992.", ""),
        danger: t("No effect on TCP connection counts.", "对 TCP 连接数没有影响。"),
        why: t("not used by TCP", "TCP 不用它"),
        seeds: "002: 262144; 004: 699040",
        ..BASE
    },
    Param {
        key: "net.core.wmem_default",
        unit: Unit::Bytes,
        meaning: t(
            "Default send buffer for non-TCP sockets (TCP uses tcp_wmem).",
            "非 TCP socket 的默认发送缓冲(TCP 用 tcp_wmem)。",
        ),
        kernel_default: t("212992.", ""),
        danger: t("No effect on TCP connection counts.", "对 TCP 连接数没有影响。"),
        why: t("not used by TCP", "TCP 不用它"),
        seeds: "002: 262144; 004: 131072",
        ..BASE
    },
    Param {
        key: "net.core.rmem_max",
        unit: Unit::Bytes,
        meaning: t(
            "Cap on SO_RCVBUF a process may ask for; does not bound TCP autotuning.",
            "进程用 SO_RCVBUF 能申请的上限;不限制 TCP 自动调节。",
        ),
        kernel_default: t("212992.", ""),
        danger: t("No effect on holding idle connections.", "对保持空闲连接没有影响。"),
        why: t("caps SO_RCVBUF only", "只限制 SO_RCVBUF"),
        seeds: "002: 16777216; 004: 50331648",
        ..BASE
    },
    Param {
        key: "net.core.wmem_max",
        unit: Unit::Bytes,
        meaning: t(
            "Cap on SO_SNDBUF a process may ask for; does not bound TCP autotuning.",
            "进程用 SO_SNDBUF 能申请的上限;不限制 TCP 自动调节。",
        ),
        kernel_default: t("212992.", ""),
        danger: t("No effect on holding idle connections.", "对保持空闲连接没有影响。"),
        why: t("caps SO_SNDBUF only", "只限制 SO_SNDBUF"),
        seeds: "002: 16777216; 004: 33554432",
        ..BASE
    },
    // ---- accepting: queues for connection storms ----
    Param {
        key: "net.core.somaxconn",
        unit: Unit::Sockets,
        verdict: Verdict::NeverLower,
        roles: LISTENERS,
        rule: Rule::Somaxconn,
        compare: Compare::AtLeast,
        default: KernelDefault::Fixed("4096"),
        meaning: t(
            "Cap on a listener's accept queue: the backlog passed to listen() is silently cut to it. \
             A full queue drops SYNs/ACKs and bumps ListenOverflows.",
            "监听 socket 全连接队列的上限:listen() 传入的 backlog 会被静默截断到它。队列满时丢弃握手并累加 ListenOverflows。",
        ),
        kernel_default: t("4096 since Linux 5.4 (128 before); 32-bit since 4.1.", "Linux 5.4 起为 4096(之前 128);4.1 起为 32 位。"),
        sizing: t("Room for 1 % of the target arriving at once on one listener (a reconnect storm after \
             a restart), as a power of two between 4096 and 65535.", "按重连风暴估算:目标连接数的 1% 同时到达同一个监听 socket,取 2 的幂,范围 4096..65535。"),
        danger: t(
            "Too low: a reconnect storm overflows the accept queue and clients retry with \
             exponential backoff (1 s, 3 s, 7 s...).",
            "过低时重连风暴会溢出全连接队列,客户端按指数退避重试(1 s、3 s、7 s……)。",
        ),
        why: t("accept queue for reconnect storms", "应对重连风暴的全连接队列"),
        seeds: "000: 262144; 002: 2048; 004: 65535",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_max_syn_backlog",
        unit: Unit::Sockets,
        verdict: Verdict::NeverLower,
        roles: LISTENERS,
        rule: Rule::SynBacklog,
        compare: Compare::AtLeast,
        default: KernelDefault::EhashSynBacklog,
        meaning: t(
            "Per-listener cap on half-open connections (SYN received, handshake not done). When it \
             fills, SYN cookies take over (TCPReqQFullDoCookies) or SYNs drop (TCPReqQFullDrop).",
            "每个监听 socket 半连接(收到 SYN、握手未完成)的上限。满了以后改用 SYN cookie(TCPReqQFullDoCookies)或丢弃(TCPReqQFullDrop)。",
        ),
        kernel_default: t("max(128, TCP established hash entries / 128).", "max(128, TCP established 哈希表项数 / 128)。"),
        sizing: t("The same as somaxconn, so neither queue is the narrower one.", "与 somaxconn 相同的风暴估算,两个队列都不会成为瓶颈。"),
        danger: t("Too low: connection storms fall back to SYN cookies or drops.", "过低时连接风暴只能靠 SYN cookie 或被丢弃。"),
        why: t("half-open queue matching somaxconn", "半连接队列与 somaxconn 一致"),
        seeds: "000: 8192; 002: 16384; 004: 655360",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_syncookies",
        unit: Unit::Switch,
        verdict: Verdict::Recommend,
        roles: LISTENERS,
        rule: Rule::Fixed("1"),
        compare: Compare::Exact,
        harm: Harm::Equals("0"),
        default: KernelDefault::Fixed("1"),
        meaning: t(
            "1: answer with SYN cookies when the SYN queue is full. A fallback, not capacity.",
            "1:SYN 队列满时用 SYN cookie 应答。是兜底,不是容量。",
        ),
        kernel_default: t("1.", ""),
        sizing: t("Keep 1.", "保持 1。"),
        danger: t("0 turns a full SYN queue into dropped connections.", "设为 0 时 SYN 队列满就直接丢连接。"),
        why: t("keep SYN cookies as the fallback", "保留 SYN cookie 兜底"),
        seeds: "004: 1",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_synack_retries",
        unit: Unit::Other,
        meaning: t(
            "How many times a SYN-ACK is retransmitted for a half-open connection.",
            "半连接的 SYN-ACK 重传次数。",
        ),
        kernel_default: t("5 (last retransmission after 31 s, gives up after 63 s).", ""),
        danger: t(
            "Lowering it drops slow or lossy clients sooner; it does not add capacity.",
            "调低只会让慢速或丢包的客户端更早失败,不增加容量。",
        ),
        why: t("no effect on how many connections fit", "不影响能容纳的连接数"),
        seeds: "000: 3; 004: 2",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_syn_retries",
        unit: Unit::Other,
        meaning: t("How many times connect() retransmits a SYN.", "connect() 重传 SYN 的次数。"),
        kernel_default: t("6 (about 127 s).", ""),
        danger: t(
            "Lowering it makes clients give up sooner in a storm; no capacity effect.",
            "调低只会让客户端在风暴中更早放弃;不影响容量。",
        ),
        why: t("no effect on how many connections fit", "不影响能容纳的连接数"),
        seeds: "000: 3; 004: 2",
        ..BASE
    },
    // ---- outgoing: ephemeral ports and TIME_WAIT ----
    Param {
        key: "net.ipv4.ip_local_port_range",
        unit: Unit::Ports,
        verdict: Verdict::Recommend,
        roles: CLIENTS,
        rule: Rule::PortRange,
        compare: Compare::WiderRange,
        default: KernelDefault::Fixed("32768 60999"),
        meaning: t(
            "Ephemeral ports for outgoing connections (about 28K by default). Global, not per source \
             IP; a port can be reused for distinct 4-tuples when the socket sets \
             IP_BIND_ADDRESS_NO_PORT (Linux 4.2) before bind.",
            "向外连接使用的临时端口范围(默认约 2.8 万个)。全局共享,不按源 IP 区分;socket 在 bind 前设置 \
             IP_BIND_ADDRESS_NO_PORT(Linux 4.2)时,不同四元组可共用同一端口。",
        ),
        kernel_default: t("32768 60999.", "32768 60999。"),
        sizing: t("10000 65535 (55536 ports; ends of different parity as the kernel docs advise; ports \
             below 10000 left to services). Beyond that, add source IPs: each holds one range of \
             ports per destination.", "10000 65535(55536 个端口;按内核文档建议两端奇偶不同;10000 以下留给服务)。再多就增加源 IP:每个源 IP 对每个目的地址各有一整段端口。"),
        danger: t(
            "Starting at 1024 (the notes) lets outgoing connections take ports services want to \
             listen on. Without IP_BIND_ADDRESS_NO_PORT, connect() burns CPU in \
             __inet_hash_connect as ports run out (haproxy #579, #2050).",
            "从 1024 开始(笔记的写法)会让向外连接占用服务要监听的端口。不用 IP_BIND_ADDRESS_NO_PORT 时,端口将尽时 \
             connect() 会在 __inet_hash_connect 里耗尽 CPU(haproxy #579、#2050)。",
        ),
        why: t(
            "more ephemeral ports per source IP and destination",
            "每个源 IP、每个目的地址可用更多临时端口",
        ),
        seeds: "000/001/002: 1024 65535; 004: 15000 65000",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_tw_reuse",
        unit: Unit::Switch,
        verdict: Verdict::Recommend,
        roles: CLIENTS,
        rule: Rule::Fixed("1"),
        compare: Compare::Exact,
        default: KernelDefault::Fixed("2"),
        meaning: t(
            "Lets connect() reuse a port held by a TIME_WAIT socket when timestamps prove it safe. \
             0 off, 1 global, 2 loopback only. Helps only outgoing connections.",
            "时间戳能证明安全时,允许 connect() 复用处于 TIME_WAIT 的端口。0 关闭,1 全局,2 仅回环。只对向外连接有用。",
        ),
        kernel_default: t("2 (loopback only).", "2(仅回环)。"),
        sizing: t("1 on load generators and proxies; servers leave it alone.", "压测端和代理设为 1;服务端不动。"),
        danger: t("No effect on a server's accepted connections.", "对服务端接受的连接没有作用。"),
        why: t("reuse TIME_WAIT ports for outgoing connections", "向外连接复用 TIME_WAIT 端口"),
        seeds: "000/002/004: 1",
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
            "已在 Linux 4.12 删除(commit 4396e46187ca)。它会丢弃时间戳倒退的 SYN:在 NAT 后面出错,\
             时间戳按连接随机化后对所有人都出错。",
        ),
        kernel_default: t("0 until 4.12; the file no longer exists.", "4.12 之前为 0;现在该文件已不存在。"),
        danger: t(
            "On old kernels it silently drops clients behind NAT; on current kernels a config line \
             setting it makes `sysctl -p` fail with an error.",
            "老内核上会静默丢弃 NAT 后面的客户端;新内核上配置文件里的这一行会让 `sysctl -p` 报错。",
        ),
        why: t("removed in 4.12; never write it", "4.12 已删除;不要再写"),
        seeds: "000/002/004: 1",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_max_tw_buckets",
        unit: Unit::Sockets,
        verdict: Verdict::NeverLower,
        rule: Rule::MaxTwBuckets,
        compare: Compare::AtLeast,
        harm: Harm::BelowHalfDefault,
        default: KernelDefault::EhashHalf,
        meaning: t(
            "Most TIME_WAIT sockets held at once; over it, TIME_WAIT is skipped and the connection \
             closes at once (TCPTimeWaitOverflow), losing TIME_WAIT's protection against stray \
             segments. A TIME_WAIT socket costs about 168 B.",
            "同时保留的 TIME_WAIT socket 上限;超过后直接跳过 TIME_WAIT(计入 TCPTimeWaitOverflow),失去对迷途报文的保护。\
             每个 TIME_WAIT 约 168 B。",
        ),
        kernel_default: t("Half the TCP established hash size (RAM-scaled).", "TCP established 哈希表大小的一半(随内存变化)。"),
        sizing: t("At least one per socket of the target (rounded up to a power of two), never below \
             the kernel default: 1M TIME_WAIT sockets cost about 168 MB.", "至少每个 socket 一个(向上取 2 的幂),不低于内核默认:100 万个 TIME_WAIT 约 168 MB。"),
        danger: t(
            "5000 (the notes) is harmful: it throws away TIME_WAIT to save a few hundred KB.",
            "5000(笔记的写法)有害:为了省几百 KB 扔掉了 TIME_WAIT 保护。",
        ),
        why: t("TIME_WAIT sockets are cheap; never lower", "TIME_WAIT 很便宜;不要调低"),
        seeds: "000: 5000 (harmful); 004: 6000000",
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
            "Most sockets closed by their process but still finishing (FIN_WAIT, LAST_ACK...). Over \
             it, orphans are reset and the kernel logs \"TCP: too many orphaned sockets\"; each \
             orphan may hold up to about 64 KB of queued data.",
            "进程已关闭但连接仍在收尾(FIN_WAIT、LAST_ACK……)的 socket 上限。超过时孤儿连接被重置,内核日志\
             \"TCP: too many orphaned sockets\";每个孤儿最多可占约 64 KB 排队数据。",
        ),
        kernel_default: t("Half the TCP established hash size (RAM-scaled).", "TCP established 哈希表大小的一半(随内存变化)。"),
        sizing: t("A quarter of the target's sockets closing at once (a peer restart), rounded up to a \
             power of two, never below the kernel default.", "按四分之一的 socket 同时关闭(对端重启)估算,向上取 2 的幂,不低于内核默认。"),
        danger: t(
            "Lowering it resets connections mid-close; the same log line also appears when tcp_mem \
             runs out, so check sockstat mem before raising.",
            "调低会在关闭过程中重置连接;tcp_mem 耗尽时也会打印同一条日志,调大前先看 sockstat 的 mem。",
        ),
        why: t("room for mass closes; never lower", "为批量关闭留余量;不要调低"),
        seeds: "002: 131072; 004: 3276800",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_fin_timeout",
        unit: Unit::Seconds,
        meaning: t(
            "How long an orphaned socket waits in FIN_WAIT_2. It does not change TIME_WAIT, which \
             is fixed at 60 s.",
            "孤儿 socket 在 FIN_WAIT_2 的等待时间。它不改变 TIME_WAIT(固定 60 秒)。",
        ),
        kernel_default: t("60.", ""),
        danger: t(
            "A low value changes little: only orphaned FIN_WAIT_2 sockets are affected.",
            "调低作用很小:只影响孤儿 FIN_WAIT_2。",
        ),
        why: t("affects only orphaned FIN_WAIT_2; not TIME_WAIT", "只影响孤儿 FIN_WAIT_2;与 TIME_WAIT 无关"),
        seeds: "000: 30; 002: 15; 004: 7",
        ..BASE
    },
    // ---- idle connections ----
    Param {
        key: "net.ipv4.tcp_slow_start_after_idle",
        unit: Unit::Switch,
        verdict: Verdict::Recommend,
        rule: Rule::Fixed("0"),
        compare: Compare::Exact,
        default: KernelDefault::Fixed("1"),
        meaning: t(
            "1: after an idle period longer than the RTO, the congestion window restarts from the \
             initial window (RFC 2861, now historic per RFC 7661).",
            "1:空闲超过 RTO 后,拥塞窗口从初始窗口重新开始(RFC 2861,RFC 7661 已将其列为历史)。",
        ),
        kernel_default: t("1.", ""),
        sizing: t("0 for long-lived connections that burst after idle (pushes).", "空闲后突发推送的长连接设为 0。"),
        danger: t(
            "With 1, every push after a quiet spell pays slow start again (seed 003's latency).",
            "为 1 时,每次安静后的推送都要重新慢启动(笔记 003 的延迟问题)。",
        ),
        why: t("pushes after idle keep their congestion window", "空闲后的推送保留拥塞窗口"),
        seeds: "003/004: 0",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_keepalive_time",
        unit: Unit::Seconds,
        verdict: Verdict::Inform,
        default: KernelDefault::Fixed("7200"),
        meaning: t(
            "Idle seconds before the first keepalive probe, only for sockets with SO_KEEPALIVE.",
            "开始发送保活探测前的空闲秒数,只对设置了 SO_KEEPALIVE 的 socket 生效。",
        ),
        kernel_default: t("7200 (2 hours).", "7200(2 小时)。"),
        sizing: t("Probes per second = sockets with SO_KEEPALIVE / keepalive_time: 1M sockets at 30 s is \
             about 33K probes/s. c1m serve uses application heartbeats, so leave it unless your \
             server relies on SO_KEEPALIVE, then size it from the probe rate you can afford.", "每秒探测数 = 设置了 SO_KEEPALIVE 的 socket 数 / keepalive_time:100 万个 socket 设 30 秒约每秒 3.3 万个探测。c1m serve 用应用层心跳,所以保持默认;若你的服务依赖 SO_KEEPALIVE,按能承受的探测速率来定。"),
        danger: t(
            "30 s on a million sockets is a constant packet storm.",
            "一百万个 socket 设 30 秒就是持续的报文风暴。",
        ),
        why: t("size from probes per second; not written", "按每秒探测数估算;不写入"),
        seeds: "000: 30; 004: 300",
        ..BASE
    },
    // ---- receive path ----
    Param {
        key: "net.core.netdev_max_backlog",
        unit: Unit::Packets,
        verdict: Verdict::Inform,
        default: KernelDefault::Fixed("1000"),
        meaning: t(
            "Per-CPU input queue of packets waiting for the stack. Drops show in /proc/net/softnet_stat \
             column 2 (column 3 counts time_squeeze).",
            "每个 CPU 等待协议栈处理的收包队列。丢包体现在 /proc/net/softnet_stat 第 2 列(第 3 列是 time_squeeze)。",
        ),
        kernel_default: t("1000.", ""),
        sizing: t("Raise only when softnet_stat column 2 grows, doubling each time (c1m doctor watches it).", "只有 softnet_stat 第 2 列增长时才调大,每次翻倍(c1m doctor 会监视它)。"),
        danger: t(
            "2000000 (the notes) only hides a CPU that cannot keep up and adds latency.",
            "2000000(笔记的写法)只会掩盖 CPU 处理不过来的问题并增加延迟。",
        ),
        why: t("raise only when softnet drops grow", "只在 softnet 丢包增长时调大"),
        seeds: "002: 20000; 004: 2000000",
        ..BASE
    },
    Param {
        key: "net.ipv4.ip_no_pmtu_disc",
        unit: Unit::Switch,
        verdict: Verdict::Harmful,
        harm: Harm::NotEquals("0"),
        default: KernelDefault::Fixed("0"),
        fix: Some("0"),
        meaning: t(
            "1 disables path MTU discovery: packets go out without DF and may fragment or vanish in \
             black holes.",
            "设为 1 会关闭路径 MTU 发现:报文不带 DF 发出,可能被分片或在黑洞中丢失。",
        ),
        kernel_default: t("0.", ""),
        sizing: t("Keep 0; use net.ipv4.tcp_mtu_probing=1 against PMTU black holes.", "保持 0;用 net.ipv4.tcp_mtu_probing=1 应对 PMTU 黑洞。"),
        danger: t(
            "1 (the notes) causes fragmentation and stalled connections; it adds no capacity.",
            "1(笔记的写法)会导致分片和连接卡死;不增加任何容量。",
        ),
        why: t("keep path MTU discovery on", "保持路径 MTU 发现"),
        seeds: "000: 1 (harmful)",
        ..BASE
    },
    Param {
        key: "net.ipv4.tcp_window_scaling",
        unit: Unit::Switch,
        verdict: Verdict::Harmful,
        harm: Harm::Equals("0"),
        default: KernelDefault::Fixed("1"),
        fix: Some("1"),
        meaning: t(
            "RFC 1323 window scaling; 1 is the default and lets windows exceed 64 KB.",
            "RFC 1323 窗口扩大选项;默认 1,允许窗口超过 64 KB。",
        ),
        kernel_default: t("1.", ""),
        sizing: t("Keep 1 (the notes set 1, which is the default).", ""),
        danger: t("0 caps every connection's window at 64 KB.", "设为 0 会把每个连接的窗口限制在 64 KB。"),
        why: t("keep window scaling on", "保持窗口扩大"),
        seeds: "004: 1 (the default)",
        ..BASE
    },
    Param {
        key: "net.ipv4.ip_nonlocal_bind",
        unit: Unit::Switch,
        meaning: t(
            "Allows bind() to addresses not (yet) on the box, for failover VIPs.",
            "允许 bind() 到本机(尚)没有的地址,用于故障切换 VIP。",
        ),
        kernel_default: t("0.", ""),
        danger: t("No effect on connection capacity.", "不影响连接容量。"),
        why: t("for VIPs, not capacity", "用于 VIP,与容量无关"),
        seeds: "004: 1",
        ..BASE
    },
    // ---- conntrack, only when the module is loaded ----
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
            "netfilter 跟踪的连接上限(每个连接一项,约 320 B)。表满时日志 \"nf_conntrack: table full, dropping packet\" \
             并丢弃新连接。已建立连接的表项 5 天后才超时。",
        ),
        kernel_default: t("= nf_conntrack_buckets = RAM/16384 clamped to 1024..262144.", "= nf_conntrack_buckets = 内存/16384,限制在 1024..262144。"),
        sizing: t("Connections' sockets plus 25 %, never below the default; only when conntrack is \
             loaded (no /proc/sys/net/netfilter/nf_conntrack_max means nothing to do). Or exempt \
             the port with a NOTRACK rule.", "连接的 socket 数加 25%,不低于默认;只在加载了 conntrack 时(没有 /proc/sys/net/netfilter/nf_conntrack_max 就无需处理)。也可以用 NOTRACK 规则豁免该端口。"),
        danger: t(
            "The notes never mention it; at the default a loaded conntrack caps the box at 262144 \
             tracked connections at most.",
            "笔记从未提到它;默认值下加载了 conntrack 的机器最多只能跟踪 262144 个连接。",
        ),
        why: t("one conntrack entry per connection", "每个连接一个 conntrack 表项"),
        seeds: "(missed by the notes)",
        ..BASE
    },
    // ---- memory management, not networking ----
    Param {
        key: "vm.swappiness",
        unit: Unit::Other,
        verdict: Verdict::Harmful,
        harm: Harm::Equals("0"),
        default: KernelDefault::Fixed("60"),
        fix: Some("60"),
        meaning: t(
            "How eagerly the kernel swaps anonymous memory versus dropping page cache.",
            "内核换出匿名内存与回收页缓存之间的倾向。",
        ),
        kernel_default: t("60.", ""),
        sizing: t("Leave the default (or 10).", "保持默认(或 10)。"),
        danger: t(
            "0 meant \"never swap\" on some 3.x kernels and OOM-killed hosts under pressure.",
            "0 在部分 3.x 内核上意味着“绝不换出”,内存紧张时会触发 OOM 杀进程。",
        ),
        why: t("0 risks the OOM killer; leave the default", "0 有 OOM 风险;保持默认"),
        seeds: "004: 0 (harmful)",
        ..BASE
    },
    Param {
        key: "kernel.msgmnb",
        meaning: t("Bytes in one SysV message queue.", "单个 SysV 消息队列的字节数。"),
        kernel_default: t("16384.", ""),
        danger: t("SysV message queues have no effect on TCP.", "SysV 消息队列与 TCP 无关。"),
        why: t("SysV IPC; no effect on TCP", "SysV IPC;与 TCP 无关"),
        seeds: "000: 655360",
        ..BASE
    },
    Param {
        key: "kernel.msgmax",
        meaning: t("Largest SysV message.", "SysV 单条消息的最大字节数。"),
        kernel_default: t("8192.", ""),
        danger: t("SysV message queues have no effect on TCP.", "SysV 消息队列与 TCP 无关。"),
        why: t("SysV IPC; no effect on TCP", "SysV IPC;与 TCP 无关"),
        seeds: "000: 655360; 004: 65536",
        ..BASE
    },
    Param {
        key: "kernel.shmmax",
        meaning: t("Largest SysV shared memory segment.", "SysV 共享内存段的最大字节数。"),
        kernel_default: t("Effectively unlimited on current kernels.", ""),
        danger: t("No effect on TCP.", "与 TCP 无关。"),
        why: t("SysV IPC; no effect on TCP", "SysV IPC;与 TCP 无关"),
        seeds: "004: 68719476736",
        ..BASE
    },
    Param {
        key: "kernel.shmall",
        meaning: t("Total SysV shared memory pages.", "SysV 共享内存总页数。"),
        kernel_default: t("Effectively unlimited on current kernels.", ""),
        danger: t("No effect on TCP.", "与 TCP 无关。"),
        why: t("SysV IPC; no effect on TCP", "SysV IPC;与 TCP 无关"),
        seeds: "004: 4294967296",
        ..BASE
    },
    Param {
        key: "kernel.sysrq",
        meaning: t("Which magic SysRq key functions are allowed.", "允许哪些 SysRq 魔术键功能。"),
        kernel_default: t("Distribution-set (often 16 or 176).", ""),
        danger: t("Not networking.", "与网络无关。"),
        why: t("not networking", "与网络无关"),
        seeds: "000: 1; 004: 0",
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
            "pam_limits' nofile (soft and hard RLIMIT_NOFILE) for LOGIN sessions only; services \
             started by systemd never read limits.conf or limits.d. `*` does not match root, so \
             root needs its own lines.",
            "pam_limits 的 nofile(软、硬 RLIMIT_NOFILE),只对登录会话生效;systemd 启动的服务不读 limits.conf \
             和 limits.d。`*` 不匹配 root,root 需要单独的行。",
        ),
        kernel_default: t("Soft 1024; hard 524288 under systemd ≥ 240 (4096 before).", "软限制 1024;systemd ≥ 240 下硬限制 524288(之前 4096)。"),
        sizing: t("The next power of two at or above the descriptors one process may hold (all of the \
             target plus a 1024 reserve), so a single-process server fits too. Must not exceed \
             fs.nr_open.", "不小于单个进程可能持有的描述符数(全部目标连接加 1024 预留)的下一个 2 的幂,单进程服务也能容纳。不得超过 fs.nr_open。"),
        danger: t(
            "Above fs.nr_open, logins fail (seed 002). Appending to limits.conf (the notes) mixes \
             c1m's lines with the distribution's; a drop-in can be removed cleanly.",
            "超过 fs.nr_open 时无法登录(笔记 002)。往 limits.conf 追加(笔记的写法)会和发行版的配置混在一起;drop-in 可以干净地删除。",
        ),
        why: t("descriptors for one process at the target", "一个进程承载目标连接所需的描述符"),
        seeds: "000/001: * - nofile 1048576; 002: 2000000; 004: 10000000",
        ..BASE
    },
    Param {
        key: "systemd.LimitNOFILE",
        kind: Kind::Systemd,
        unit: Unit::Descriptors,
        verdict: Verdict::Recommend,
        rule: Rule::Nofile,
        compare: Compare::AtLeast,
        added: Some("systemd 240 raised the default hard limit to 524288"),
        meaning: t(
            "RLIMIT_NOFILE for a systemd service, set in a drop-in \
             /etc/systemd/system/UNIT.service.d/*.conf under [Service].",
            "systemd 服务的 RLIMIT_NOFILE,在 /etc/systemd/system/UNIT.service.d/*.conf 的 [Service] 段设置。",
        ),
        kernel_default: t("Soft 1024, hard 524288 (systemd ≥ 240).", "软 1024,硬 524288(systemd ≥ 240)。"),
        sizing: t("The same value as limits.nofile.", "与 limits.nofile 相同。"),
        danger: t(
            "Forgetting it is the usual reason a tuned box still stops at 1024 or 524288 \
             descriptors: services do not read limits.d.",
            "忘了它是调优后服务仍卡在 1024 或 524288 个描述符的常见原因:服务不读 limits.d。",
        ),
        why: t("services do not read limits.d", "服务不读 limits.d"),
        seeds: "(missed by the notes)",
        ..BASE
    },
    // ---- set with other tools ----
    Param {
        key: "route.initcwnd",
        kind: Kind::Other,
        unit: Unit::Segments,
        verdict: Verdict::Inform,
        default: KernelDefault::Fixed("10"),
        meaning: t(
            "Initial congestion window of a route (`ip route change ... initcwnd N`); also the \
             restart window after idle when tcp_slow_start_after_idle=1.",
            "路由的初始拥塞窗口(`ip route change ... initcwnd N`);tcp_slow_start_after_idle=1 时也是空闲后的重启窗口。",
        ),
        kernel_default: t("10 segments (RFC 6928).", ""),
        sizing: t("Informational; tcp_slow_start_after_idle=0 matters more for pushes.", ""),
        danger: t("Large values burst into shallow buffers.", "过大时会向浅缓冲突发。"),
        why: t("informational", "仅供参考"),
        seeds: "003 (discussed)",
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
            "网卡收发环大小(`ethtool -g IFACE` 查看,`ethtool -G` 设置);配合 RPS/RFS 把收包分散到多个 CPU。",
        ),
        kernel_default: t("Driver-specific; often below the hardware maximum.", ""),
        sizing: t("Raise to the hardware maximum when the NIC reports rx drops.", ""),
        danger: t("Not visible in sysctls; drops hide in `ethtool -S`.", "不在 sysctl 里;丢包藏在 `ethtool -S`。"),
        why: t("informational", "仅供参考"),
        seeds: "(missed by the notes)",
        ..BASE
    },
];
