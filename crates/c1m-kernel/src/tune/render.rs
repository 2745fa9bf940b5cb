//! Renders a plan: the text report, `--format json`, `--format sysctl`, the contents of the
//! three files c1m recommends (sysctl.d drop-in, limits.d drop-in, systemd unit drop-in), and
//! the `docker run` flags for a container (the per-namespace sysctls; the rest is the host's).
//! `apply` writes exactly what these functions return, so what is printed is what is written.
//!
//! Owns: wording and layout. No sizing, no I/O.

use super::calc::{Plan, Rec, Said};
use super::units::human_bytes;
use crate::params::{Kind, Lang, Param, Verdict, PARAMS};
use crate::root::normalize_value;
use serde_json::json;
use std::fmt::Write;

/// The unit the plan shows a LimitNOFILE= drop-in for when no --service is given: the
/// gateway's own, so the printed path is one that can be used as it stands.
pub const DEFAULT_UNIT: &str = "c1m";

/// Where the systemd drop-in for `service` goes.
pub fn systemd_path(service: &str) -> String {
    format!(
        "/etc/systemd/system/{}.d/90-c1m-limits.conf",
        unit_name(service)
    )
}

/// The unit file name `--service NAME` stands for (`NAME.service` unless it has a suffix).
pub fn unit_name(service: &str) -> String {
    if service.contains('.') {
        service.to_string()
    } else {
        format!("{service}.service")
    }
}

/// One `key = value` for the sysctl drop-in, with its reason.
#[derive(Debug, Clone)]
pub struct SysctlLine {
    pub param: &'static Param,
    pub value: String,
    pub basis: Said,
}

/// The sysctl lines of a plan (recommendations that apply, in table order).
pub fn plan_sysctls(plan: &Plan) -> Vec<SysctlLine> {
    plan.recs
        .iter()
        .filter(|r| r.param.kind == Kind::Sysctl)
        .filter_map(|r: &Rec| {
            r.value.clone().map(|value| SysctlLine {
                param: r.param,
                value,
                basis: r.basis.clone(),
            })
        })
        .collect()
}

/// A container's share of the plan: what `docker run` sets for a container with its own
/// network namespace, and what stays the host's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    /// Per-namespace sysctls the plan writes, except those a fresh namespace already has at
    /// the value (the kernel's default), in table order.
    pub sysctls: Vec<(&'static str, String)>,
    /// Sysctls the plan writes that are host-wide: set on the host, never in the container.
    pub host_wide: Vec<&'static str>,
    /// RLIMIT_NOFILE for `--ulimit nofile=N:N`.
    pub nofile: String,
}

impl Container {
    /// The `docker run` flags: `--ulimit nofile=N:N --sysctl KEY=VALUE …`.
    pub fn docker_flags(&self) -> String {
        let mut s = format!("--ulimit nofile={0}:{0}", self.nofile);
        for (k, v) in &self.sysctls {
            if v.contains(' ') {
                let _ = write!(s, " --sysctl {k}=\"{v}\"");
            } else {
                let _ = write!(s, " --sysctl {k}={v}");
            }
        }
        s
    }
}

/// Splits the plan's sysctls into the container's and the host's.
pub fn container(plan: &Plan) -> Container {
    let mut c = Container {
        sysctls: Vec::new(),
        host_wide: Vec::new(),
        nofile: plan.value("limits.nofile").unwrap_or("?").to_string(),
    };
    for l in plan_sysctls(plan) {
        if !l.param.netns {
            c.host_wide.push(l.param.key);
            continue;
        }
        let default = super::calc::kernel_default(l.param, &plan.host);
        if default.is_some_and(|d| normalize_value(&d) == normalize_value(&l.value)) {
            continue;
        }
        c.sysctls.push((l.param.key, l.value));
    }
    c
}

fn header(plan: &Plan, lang: Lang) -> String {
    let (c, r) = (plan.target.conns, plan.target.role.name());
    let (ram, cpus, page) = (
        human_bytes(plan.host.mem_bytes),
        plan.host.cpus,
        plan.host.page_size,
    );
    match lang {
        Lang::En => {
            format!("c1m tune --conns {c} --role {r} (RAM {ram}, {cpus} CPUs, page {page} B)")
        }
        Lang::Zh => {
            format!("c1m tune --conns {c} --role {r}（内存 {ram}，{cpus} 个 CPU，页大小 {page} B）")
        }
    }
}

/// Parentheses in the output language (full width in Chinese).
fn paren(lang: Lang) -> (&'static str, &'static str) {
    match lang {
        Lang::En => (" (", ")"),
        Lang::Zh => ("（", "）"),
    }
}

/// /etc/sysctl.d/90-c1m.conf: each value preceded by its one-line why.
pub fn sysctl_dropin(plan: &Plan, lines: &[SysctlLine], lang: Lang) -> String {
    let mut s = match lang {
        Lang::En => format!(
            "# Written by {}.\n# Undo with `c1m tune --revert`; explain a key with `c1m tune explain KEY`.\n",
            header(plan, lang)
        ),
        Lang::Zh => format!(
            "# 由 {} 写入。\n# 用 `c1m tune --revert` 撤销；用 `c1m tune explain KEY` 查看说明。\n",
            header(plan, lang)
        ),
    };
    for l in lines {
        let (open, close) = paren(lang);
        let _ = write!(
            s,
            "\n# {}{open}{}{close}\n{} = {}\n",
            l.param.why.get(lang),
            l.basis.get(lang),
            l.param.key,
            l.value
        );
    }
    s
}

/// /etc/security/limits.d/90-c1m.conf. `*` does not match root in pam_limits, hence the
/// root lines.
pub fn limits_dropin(plan: &Plan, nofile: &str, lang: Lang) -> String {
    let why = crate::params::lookup("limits.nofile")
        .map(|p| p.why.get(lang))
        .unwrap_or_default();
    let nr_open = plan.value("fs.nr_open").unwrap_or("?");
    let head = match lang {
        Lang::En => format!(
            "# Written by {}.\n# {why}: login sessions only (pam_limits); services need LimitNOFILE=.\n\
             # `*` does not match root, hence the root lines. fs.nr_open ({nr_open}) is raised first.\n",
            header(plan, lang)
        ),
        Lang::Zh => format!(
            "# 由 {} 写入。\n# {why}：只对登录会话生效（pam_limits）；服务需要 LimitNOFILE=。\n\
             # `*` 不匹配 root，所以另有 root 的行。fs.nr_open（{nr_open}）先行调大。\n",
            header(plan, lang)
        ),
    };
    format!(
        "{head}*     soft  nofile  {nofile}\n*     hard  nofile  {nofile}\n\
         root  soft  nofile  {nofile}\nroot  hard  nofile  {nofile}\n"
    )
}

/// The systemd unit drop-in.
pub fn systemd_dropin(plan: &Plan, nofile: &str) -> String {
    format!(
        "# Written by {}.\n# Services do not read limits.d. Then: systemctl daemon-reload && systemctl restart UNIT\n\
         [Service]\nLimitNOFILE={nofile}\n",
        header(plan, Lang::En)
    )
}

/// `--format sysctl`: the drop-in file alone.
pub fn render_sysctl(plan: &Plan, lang: Lang) -> String {
    sysctl_dropin(plan, &plan_sysctls(plan), lang)
}

/// Entries c1m refuses to write, with the reason.
pub fn refused() -> impl Iterator<Item = &'static Param> {
    PARAMS
        .iter()
        .filter(|p| matches!(p.verdict, Verdict::Harmful | Verdict::Obsolete))
}

/// The text report, every sentence in `lang`.
pub fn render_text(plan: &Plan, lang: Lang, service: Option<&str>) -> String {
    let m = &plan.math;
    let t = &plan.target;
    let zh = lang == Lang::Zh;
    let (po, pc) = paren(lang);
    let mut s = String::new();
    let mut line = |en: String, zh_text: String| {
        s.push_str(if zh { &zh_text } else { &en });
        s.push('\n');
    };
    line(
        format!("{}\n", header(plan, lang)),
        format!("{}\n", header(plan, lang)),
    );
    line("Memory math".into(), "内存估算".into());
    let (spc, per, per_conn) = (
        m.sockets_per_conn,
        m.kernel_bytes_per_socket,
        m.kernel_bytes_per_conn,
    );
    let from = if plan.host.obj.from_slab {
        Said::new(
            "this kernel's /proc/slabinfo".into(),
            "本机内核的 /proc/slabinfo".into(),
        )
    } else {
        Said::new(
            "measured with bench/object-sizes.sh".into(),
            "用 bench/object-sizes.sh 实测".into(),
        )
    };
    line(
        format!("  kernel memory per connection: {spc} socket(s) × {per} B = {per_conn} B ({}; idle sockets hold no buffers)", from.en),
        format!("  每个连接的内核内存：{spc} 个 socket × {per} B = {per_conn} B（{}；空闲 socket 不占缓冲）", from.zh),
    );
    let total = human_bytes(m.kernel_bytes_total);
    line(
        format!("  kernel memory for {} connections: {total} (a load generator on the same box adds as much again)", t.conns),
        format!("  {} 个连接的内核内存：{total}（同机运行的压测客户端还要再加同样多）", t.conns),
    );
    let (socks, buf, bt, bp, page) = (
        m.sockets,
        t.buffered,
        human_bytes(m.buffered_bytes_total),
        m.buffered_pages,
        plan.host.page_size,
    );
    line(
        format!("  buffered at once: {socks} sockets × {buf} B = {bt} = {bp} pages of {page} B"),
        format!("  同时排队：{socks} 个 socket × {buf} B = {bt} = {bp} 页（每页 {page} B）"),
    );
    let pg = |v: u64| human_bytes(v.saturating_mul(plan.host.page_size));
    let [a, b, c] = m.tcp_mem;
    let [da, db, dc] = m.tcp_mem_default;
    let (cap, capb, share) = (
        m.tcp_mem_cap,
        pg(m.tcp_mem_cap),
        super::calc::TCP_MEM_RAM_PCT,
    );
    line(
        format!(
            "  tcp_mem (pages): {a} {b} {c} = {} / {} / {} (kernel default ≈ {da} {db} {dc}; max never above {cap} = {capb}, {share} % of RAM less socket slab)",
            pg(a), pg(b), pg(c)
        ),
        format!(
            "  tcp_mem（页）：{a} {b} {c} = {} / {} / {}（内核默认 ≈ {da} {db} {dc}；max 不超过 {cap} = {capb}，即内存的 {share}% 减去 socket slab）",
            pg(a), pg(b), pg(c)
        ),
    );
    let (idle, busy) = (m.capacity_idle, m.capacity_busy);
    line(
        format!("  this RAM holds: {idle} idle connections, {busy} with {buf} B buffered each (a quarter of RAM kept for the rest)"),
        format!("  这些内存能容纳：{idle} 个空闲连接，或 {busy} 个各排队 {buf} B 的连接（留出四分之一内存给其他用途）"),
    );
    let (fds, nofile_n, fpw, cpus) = (m.fds_total, m.nofile, m.fds_per_worker, plan.host.cpus);
    line(
        format!("  descriptors: {fds} in all; nofile {nofile_n} per process; {fpw} per worker with {cpus} workers (one per CPU)"),
        format!("  描述符：共 {fds} 个；每进程 nofile {nofile_n}；{cpus} 个 worker（每 CPU 一个）时每个 {fpw} 个"),
    );
    if let (Some(ips), Some(per_src)) = (m.source_ips_per_destination, m.conns_per_source) {
        line(
            format!("  source addresses per destination ip:port: {ips} ({per_src} connections each, under the connect() cliff at half the port range; bind() each socket to its source with IP_BIND_ADDRESS_NO_PORT so the port is chosen at connect(); 127.0.0.0/8 is free on loopback)"),
            format!("  每个目的 ip:port 需要的源地址：{ips} 个（每个 {per_src} 个连接，低于端口范围一半处的 connect() 性能悬崖；每个 socket 先设置 IP_BIND_ADDRESS_NO_PORT 再 bind() 到源地址，端口在 connect() 时才选；回环上 127.0.0.0/8 可随意使用）"),
        );
    }
    let (tw, kd, kds, kn, kns) = (
        human_bytes(m.time_wait_bytes_at_cap),
        m.keepalive_probes_default,
        super::calc::DEFAULT_KEEPALIVE_SECS,
        m.keepalive_probes_notes,
        super::calc::NOTES_KEEPALIVE_SECS,
    );
    line(
        format!("  TIME_WAIT at the cap: {tw}; keepalive probes/s if every socket sets SO_KEEPALIVE: {kd} at {kds} s (default), {kn} at {kns} s (the notes)"),
        format!("  TIME_WAIT 达到上限时：{tw}；若每个 socket 都设置 SO_KEEPALIVE，每秒保活探测：{kds} 秒（默认）时 {kd} 个，{kns} 秒（笔记）时 {kn} 个"),
    );
    for w in &plan.warnings {
        line(format!("  WARNING: {}", w.en), format!("  警告：{}", w.zh));
    }
    let dropin = super::check::SYSCTL_DROPIN;
    line(
        format!("\n{dropin} (order matters: nr_open first)"),
        format!("\n{dropin}（顺序重要：nr_open 最先）"),
    );
    for l in plan_sysctls(plan) {
        let text = format!(
            "  {} = {}\n      # {}{po}{}{pc}",
            l.param.key,
            l.value,
            l.param.why.get(lang),
            l.basis.get(lang)
        );
        line(text.clone(), text);
    }
    let skipped: Vec<&str> = plan
        .recs
        .iter()
        .filter(|r| r.value.is_none())
        .map(|r| r.key)
        .collect();
    if !skipped.is_empty() {
        let list = skipped.join(", ");
        line(
            format!("  (not for this box: {list})"),
            format!("  （不适用于这台机器：{list}）"),
        );
    }
    let nofile = plan.value("limits.nofile").unwrap_or("?");
    line(
        format!("\n{}", super::check::LIMITS_DROPIN),
        format!("\n{}", super::check::LIMITS_DROPIN),
    );
    for l in limits_dropin(plan, nofile, lang)
        .lines()
        .filter(|l| !l.starts_with('#'))
    {
        line(format!("  {l}"), format!("  {l}"));
    }
    let path = systemd_path(service.unwrap_or(DEFAULT_UNIT));
    line(
        format!("\n{path} (services do not read limits.d; --service NAME for another unit)\n  [Service]\n  LimitNOFILE={nofile}"),
        format!("\n{path}（服务不读 limits.d；其他单元用 --service NAME）\n  [Service]\n  LimitNOFILE={nofile}"),
    );
    let c = container(plan);
    let flags = c.docker_flags();
    let host_wide = c.host_wide.join(", ");
    line(
        format!(
            "\nContainer with its own network: only per-namespace sysctls can be set in it\n  \
             docker run {flags} IMAGE\n  host-wide, set on the host: {host_wide}"
        ),
        format!(
            "\n有独立网络的容器：只有按网络命名空间隔离的 sysctl 能在容器里设置\n  \
             docker run {flags} IMAGE\n  整机生效、要在宿主机上设置的：{host_wide}"
        ),
    );
    line(
        "\nRefused (c1m tune explain KEY):".into(),
        "\n拒绝写入（`c1m tune explain KEY`）：".into(),
    );
    for p in refused() {
        let text = format!("  {:<34} {}: {}", p.key, p.verdict.name(), p.why.get(lang));
        let text_zh = format!("  {:<34} {}：{}", p.key, p.verdict.name(), p.why.get(lang));
        line(text, text_zh);
    }
    line(
        "\nInformational, not written:".into(),
        "\n仅供参考，不写入：".into(),
    );
    for p in PARAMS.iter().filter(|p| p.verdict == Verdict::Inform) {
        let text = format!("  {:<34} {}", p.key, p.why.get(lang));
        line(text.clone(), text);
    }
    let ignored: Vec<&str> = PARAMS
        .iter()
        .filter(|p| p.verdict == Verdict::Ignore)
        .map(|p| p.key)
        .collect();
    let list = ignored.join(", ");
    line(
        format!("\nIgnored (no effect on holding connections): {list}"),
        format!("\n忽略（与保持连接无关）：{list}"),
    );
    s
}

/// `--format json`: the plan, the three files and the refused keys.
pub fn render_json(plan: &Plan, lang: Lang, service: Option<&str>) -> serde_json::Value {
    let nofile = plan.value("limits.nofile").unwrap_or("?");
    let c = container(plan);
    let sysctls: Vec<_> = plan_sysctls(plan)
        .into_iter()
        .map(|l| {
            json!({
                "key": l.param.key,
                "value": l.value,
                "verdict": l.param.verdict.name(),
                "why": l.param.why.get(lang),
                "basis": l.basis.get(lang),
            })
        })
        .collect();
    let refused: Vec<_> = refused()
        .map(|p| json!({"key": p.key, "verdict": p.verdict.name(), "why": p.why.get(lang), "removed": p.removed}))
        .collect();
    json!({
        "host": plan.host,
        "target": plan.target,
        "math": plan.math,
        "warnings": plan.warnings.iter().map(|w| w.get(lang)).collect::<Vec<_>>(),
        "sysctls": sysctls,
        "nofile": nofile,
        "files": {
            super::check::SYSCTL_DROPIN: render_sysctl(plan, lang),
            super::check::LIMITS_DROPIN: limits_dropin(plan, nofile, lang),
            systemd_path(service.unwrap_or(DEFAULT_UNIT)): systemd_dropin(plan, nofile),
        },
        "refused": refused,
        "container": {
            "docker_run": c.docker_flags(),
            "sysctls": c.sysctls.iter().map(|(k, v)| json!({"key": k, "value": v})).collect::<Vec<_>>(),
            "host_wide": c.host_wide,
        },
    })
}
