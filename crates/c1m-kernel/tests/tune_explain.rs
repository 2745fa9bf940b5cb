//! `c1m tune explain KEY`: entries, including the keys c1m refuses, in English and Chinese.

use crate::tune_support;

use c1m_kernel::params::PARAMS;
use tune_support::Fake;

#[test]
fn explains_obsolete_and_harmful_keys() {
    let f = Fake::new();
    let (out, code) = f.run(&["explain", "net.ipv4.tcp_tw_recycle"]).unwrap();
    assert_eq!(code, 0);
    assert!(out.contains("[obsolete]"), "{out}");
    assert!(out.contains("4.12"), "{out}");
    assert!(out.contains("NAT"), "{out}");
    let (out, _) = f.run(&["explain", "tcp_max_tw_buckets"]).unwrap();
    assert!(out.contains("5000"), "{out}");
    assert!(out.contains("[never-lower]"), "{out}");
    let (out, _) = f.run(&["explain", "net/ipv4/ip_no_pmtu_disc"]).unwrap();
    assert!(out.contains("[harmful]"), "{out}");
}

#[test]
fn chinese_and_json() {
    let f = Fake::new();
    let (out, _) = f.run(&["explain", "fs.nr_open", "--lang", "zh"]).unwrap();
    assert!(out.contains("含义"), "{out}");
    assert!(out.contains("RLIMIT_NOFILE"), "{out}");
    let (out, _) = f.run(&["explain", "tcp_mem", "--format", "json"]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["key"], "net.ipv4.tcp_mem");
    assert_eq!(v["unit"], "pages");
    assert!(v["meaning"]["zh"].as_str().unwrap().contains("页"));
}

#[test]
fn lists_every_key_and_rejects_unknown_ones() {
    let f = Fake::new();
    let (out, _) = f.run(&["explain"]).unwrap();
    for p in PARAMS {
        assert!(out.contains(p.key), "{} missing from the list", p.key);
    }
    assert!(f.run(&["explain", "net.ipv4.tcp_bogus"]).is_err());
}

/// Every threshold cites where it comes from, and `tune explain KEY` prints it.
#[test]
fn explain_prints_the_source_of_every_entry() {
    let f = Fake::new();
    for p in PARAMS {
        assert!(!p.source.is_empty(), "{} has no source", p.key);
        let (out, _) = f.run(&["explain", p.key]).unwrap();
        assert!(
            out.contains(&format!("  source: {}", p.source)),
            "{}: {out}",
            p.key
        );
    }
    let (out, _) = f.run(&["explain", "tcp_mem"]).unwrap();
    assert!(out.contains("tcp_init_mem()"), "{out}");
    let (out, _) = f.run(&["explain", "ip_local_port_range"]).unwrap();
    assert!(out.contains("bench/connect-cliff.sh"), "{out}");
    let (out, _) = f
        .run(&["explain", "nf_conntrack_buckets", "--lang", "zh"])
        .unwrap();
    assert!(
        out.contains("出处：net/netfilter/nf_conntrack_core.c"),
        "{out}"
    );
}

/// Finds English prose in Chinese output: three or more plain words in a row (identifiers
/// such as net.ipv4.tcp_mem, LimitNOFILE=, 5.7 GiB, quoted kernel messages and `commands`
/// are not words here, and the `source` line cites files and commits as they are named).
fn english_runs(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in text.lines() {
        let line = line.trim_start();
        if line.starts_with("出处") || line.starts_with('#') && line.contains("Written by") {
            continue;
        }
        // Drop quoted kernel messages and backquoted commands.
        let mut plain = String::new();
        let mut quote: Option<char> = None;
        for ch in line.chars() {
            match (quote, ch) {
                (None, '"' | '`' | '“') => quote = Some(ch),
                (Some('“'), '”') | (Some('"'), '"') | (Some('`'), '`') => quote = None,
                (None, c) => plain.push(c),
                _ => {}
            }
        }
        // Columns (two or more spaces: verdict names, limits.conf lines) are not prose.
        let plain = plain.replace("  ", "\t");
        // A run of plain words joined by single spaces; any other separator ends it.
        let mut run: Vec<String> = Vec::new();
        let mut word = String::new();
        let mut flush = |run: &mut Vec<String>| {
            if run.len() >= 3 {
                found.push(format!("{:?} in {line:?}", run.join(" ")));
            }
            run.clear();
        };
        for ch in plain.chars().chain(std::iter::once('\n')) {
            if ch.is_ascii_alphanumeric() || "_.=/-+<>'".contains(ch) {
                word.push(ch);
                continue;
            }
            let plain_word = word.len() >= 2 && word.chars().all(|c| c.is_ascii_alphabetic());
            if plain_word {
                run.push(std::mem::take(&mut word));
            } else {
                if !word.is_empty() {
                    flush(&mut run);
                }
                word.clear();
            }
            if ch != ' ' {
                flush(&mut run);
            }
        }
    }
    found
}

/// ASCII punctuation touching Chinese text (it should be full width: ，；：（）).
fn half_width_punctuation(text: &str) -> Vec<String> {
    let cjk = |c: char| ('\u{4e00}'..='\u{9fff}').contains(&c);
    let mut found = Vec::new();
    for line in text.lines() {
        let cs: Vec<char> = line.chars().collect();
        for i in 0..cs.len() {
            if ",;:()".contains(cs[i]) {
                let before = i > 0 && cjk(cs[i - 1]);
                let after = i + 1 < cs.len() && cjk(cs[i + 1]);
                if before || after {
                    found.push(line.to_string());
                    break;
                }
            }
        }
    }
    found
}

#[test]
fn chinese_output_has_no_english_sentence_and_full_width_punctuation() {
    let f = Fake::new();
    // Config lines the check reports, so their notes are in the output too.
    f.write(
        "/etc/security/limits.d/60-seed.conf",
        "*  soft nofile 2000000\nweb hard nofile 4096\n",
    );
    f.write(
        "/etc/sysctl.d/99-notes.conf",
        "net.ipv4.tcp_tw_recycle = 1\nnet.ipv4.tcp_max_tw_buckets = 5000\n",
    );
    f.sysctl("vm.swappiness", "0\n");
    let mut all = String::new();
    for p in PARAMS {
        let (out, _) = f.run(&["explain", p.key, "--lang", "zh"]).unwrap();
        all.push_str(&out);
    }
    let (list, _) = f.run(&["explain", "--lang", "zh"]).unwrap();
    all.push_str(&list);
    for args in [
        &["--conns", "1M", "--lang", "zh"][..],
        &["--conns", "1M", "--role", "proxy", "--lang", "zh"],
        &[
            "--conns", "10M", "--mem", "2G", "--role", "client", "--lang", "zh",
        ],
        &["--conns", "250K", "--lang", "zh", "--format", "sysctl"],
        &["--conns", "1M", "--lang", "zh", "--check"],
        &["--conns", "1M", "--mem", "2G", "--lang", "zh", "--check"],
    ] {
        let (out, _) = f.run(args).unwrap();
        assert!(
            out.contains("内存估算") || out.contains("由 c1m tune") || out.contains("项发现"),
            "{out}"
        );
        all.push_str(&out);
    }
    let english = english_runs(&all);
    assert!(
        english.is_empty(),
        "English left in zh output:\n{}",
        english.join("\n")
    );
    let half = half_width_punctuation(&all);
    assert!(
        half.is_empty(),
        "half-width punctuation in zh output:\n{}",
        half.join("\n")
    );
    // The English output does trip the detector, so it can fail.
    let (en, _) = f.run(&["--conns", "1M"]).unwrap();
    assert!(!english_runs(&en).is_empty());
}
