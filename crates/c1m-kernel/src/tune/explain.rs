//! `c1m tune explain [KEY]`: prints one knowledge-base entry (including obsolete and harmful
//! keys, which is where c1m says why it refuses them), or lists every key with its verdict.
//!
//! Owns: the explain layout in English and Chinese. The facts come from `params`.

use crate::params::{lookup, Kind, Lang, Param, Unit, Verdict, PARAMS};
use anyhow::{bail, Result};
use std::fmt::Write;

struct Labels {
    verdict: &'static str,
    added: &'static str,
    removed: &'static str,
    meaning: &'static str,
    default: &'static str,
    sizing: &'static str,
    danger: &'static str,
    seeds: &'static str,
    c1m: &'static str,
    fix: &'static str,
    roles: &'static str,
    source: &'static str,
}

const EN: Labels = Labels {
    verdict: "verdict",
    added: "added",
    removed: "removed in",
    meaning: "meaning",
    default: "kernel default",
    sizing: "c1m sizing",
    danger: "danger",
    seeds: "field notes set",
    c1m: "c1m",
    fix: "safe value",
    roles: "roles",
    source: "source",
};

const ZH: Labels = Labels {
    verdict: "结论",
    added: "引入",
    removed: "删除于",
    meaning: "含义",
    default: "内核默认",
    sizing: "c1m 的取值",
    danger: "风险",
    seeds: "笔记中的设置",
    c1m: "c1m",
    fix: "安全值",
    roles: "适用角色",
    source: "出处",
};

/// What c1m does with a key of this verdict.
pub fn verdict_sentence(v: Verdict, lang: Lang) -> &'static str {
    match (v, lang) {
        (Verdict::Recommend, Lang::En) => "sizes it and writes it (tune --apply).",
        (Verdict::NeverLower, Lang::En) => {
            "raises it when the target needs more; never writes a value below the kernel's own or the live one."
        }
        (Verdict::Harmful, Lang::En) => {
            "refuses to recommend it; --check flags the harmful value and --apply restores the safe one."
        }
        (Verdict::Obsolete, Lang::En) => {
            "refuses to write it; --check warns when a config file under /etc still sets it."
        }
        (Verdict::Inform, Lang::En) => "shows it with sizing notes; does not write it.",
        (Verdict::Ignore, Lang::En) => "no effect on holding connections; leaves the kernel default.",
        (Verdict::Recommend, Lang::Zh) => "计算并写入（tune --apply）。",
        (Verdict::NeverLower, Lang::Zh) => "目标需要时调大；绝不写入低于内核默认或当前值的数。",
        (Verdict::Harmful, Lang::Zh) => "拒绝推荐；--check 标出有害值，--apply 恢复安全值。",
        (Verdict::Obsolete, Lang::Zh) => "拒绝写入；/etc 下的配置文件仍设置它时 --check 会警告。",
        (Verdict::Inform, Lang::Zh) => "只给出估算说明，不写入。",
        (Verdict::Ignore, Lang::Zh) => "与保持连接无关；保持内核默认。",
    }
}

fn kind_zh(k: Kind) -> &'static str {
    match k {
        Kind::Sysctl => "sysctl",
        Kind::Limits => "pam 限制",
        Kind::Systemd => "systemd",
        Kind::Other => "其他工具",
    }
}

fn unit_zh(u: Unit) -> &'static str {
    match u {
        Unit::Descriptors => "描述符",
        Unit::Pages => "页",
        Unit::Bytes => "字节",
        Unit::Seconds => "秒",
        Unit::Switch => "开关",
        Unit::Ports => "端口",
        Unit::Sockets => "socket 数",
        Unit::Entries => "表项",
        Unit::Packets => "包",
        Unit::Segments => "报文段",
        Unit::Other => "其他",
    }
}

/// The field notes' settings; the few English words in them rendered in Chinese.
fn seeds(s: &str, lang: Lang) -> String {
    if lang == Lang::En {
        return s.to_string();
    }
    s.replace("(missed by the notes)", "（笔记未提及）")
        .replace(" (harmful)", "（有害）")
        .replace(" (the default)", "（即默认值）")
        .replace(" (discussed)", "（有讨论）")
        .replace(" hit the 1048576 ceiling", " 碰到了 1048576 的上限")
        .replace("; ", "；")
}

/// One entry as text.
pub fn render_entry(p: &Param, lang: Lang) -> String {
    let l = if lang == Lang::Zh { &ZH } else { &EN };
    let mut s = match lang {
        Lang::En => format!(
            "{}  [{}]  {}, {}\n",
            p.key,
            p.verdict.name(),
            p.kind.name(),
            p.unit.name()
        ),
        Lang::Zh => format!(
            "{}  [{}]  {}，{}\n",
            p.key,
            p.verdict.name(),
            kind_zh(p.kind),
            unit_zh(p.unit)
        ),
    };
    let colon = if lang == Lang::Zh { "：" } else { ": " };
    let mut field = |label: &str, text: &str| {
        if !text.is_empty() {
            let _ = writeln!(s, "  {label}{colon}{text}");
        }
    };
    field(l.meaning, p.meaning.get(lang));
    field(l.default, p.kernel_default.get(lang));
    field(l.sizing, p.sizing.get(lang));
    field(l.danger, p.danger.get(lang));
    field(l.added, p.added.unwrap_or(""));
    field(l.removed, p.removed.unwrap_or(""));
    field(l.seeds, &seeds(p.seeds, lang));
    if let Some(fix) = p.fix {
        field(l.fix, fix);
    }
    field(l.verdict, p.why.get(lang));
    field(l.c1m, verdict_sentence(p.verdict, lang));
    if !p.roles.is_empty() {
        let roles: Vec<&str> = p.roles.iter().map(|r| r.name()).collect();
        field(
            l.roles,
            &roles.join(if lang == Lang::Zh { "，" } else { ", " }),
        );
    }
    // Kernel files, commits and measurement commands are identifiers: not translated.
    field(l.source, p.source);
    s
}

/// Every key with its verdict and one-line why.
pub fn render_list(lang: Lang) -> String {
    let mut s = String::new();
    for p in PARAMS {
        let _ = writeln!(
            s,
            "{:<34} {:<12} {}",
            p.key,
            p.verdict.name(),
            p.why.get(lang)
        );
    }
    s
}

/// Finds the entry or explains that c1m does not know the key.
pub fn find(key: &str) -> Result<&'static Param> {
    match lookup(key) {
        Some(p) => Ok(p),
        None => {
            bail!("c1m knows nothing about {key:?}; `c1m tune explain` lists the keys it knows")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn obsolete_entry_says_why() {
        let s = render_entry(find("tcp_tw_recycle").unwrap(), Lang::En);
        assert!(s.contains("[obsolete]"), "{s}");
        assert!(s.contains("4.12"), "{s}");
        assert!(s.contains("refuses"), "{s}");
    }

    #[test]
    fn chinese_rendering() {
        let s = render_entry(find("net.ipv4.tcp_mem").unwrap(), Lang::Zh);
        assert!(s.contains("含义"), "{s}");
        assert!(s.contains("单位是页"), "{s}");
    }

    #[test]
    fn unknown_key_errors() {
        assert!(find("net.ipv4.tcp_nonsense").is_err());
    }
}
