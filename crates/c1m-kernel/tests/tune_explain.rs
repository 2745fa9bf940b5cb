//! `c1m tune explain KEY`: entries, including the keys c1m refuses, in English and Chinese.

mod tune_support;

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
