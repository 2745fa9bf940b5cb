//! Packaging: the systemd unit passes `systemd-analyze verify` and keeps its hardening, the
//! default config file starts a real server, and the .deb built by cargo-deb holds a stripped
//! binary, the config, the unit and every document its docs link, with the right modes; it is
//! checked extracted into a temporary directory (`dpkg-deb -x`) and run from there, never
//! installed: the host's package database and /etc are left alone (a host with c1m installed
//! keeps its /etc/c1m/c1m.toml).
//! Needs: systemd (systemd-analyze), dpkg, binutils (readelf), and cargo-deb
//! (scripts/install-test-deps.sh).

use crate::common;

use common::{c1m, Server};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A temp directory removed even when an assertion fails.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("c1m-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn systemd_unit_verifies_and_is_hardened() {
    let unit = std::fs::read_to_string(repo().join("dist/c1m.service")).unwrap();
    for line in [
        "Type=notify",
        "WatchdogSec=30",
        "LimitNOFILE=1048576",
        "ExecStart=/usr/bin/c1m serve --config /etc/c1m/c1m.toml",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "DynamicUser=yes",
        // Empty: the default port 8080 needs no capability.
        "CapabilityBoundingSet=",
    ] {
        assert!(unit.lines().any(|l| l == line), "unit lacks {line:?}");
    }
    // verify checks that ExecStart's binary exists: point it at the binary under test.
    let dir = TempDir::new("unit");
    let copy = dir.0.join("c1m.service");
    let rewritten = unit.replace("/usr/bin/c1m ", &format!("{} ", env!("CARGO_BIN_EXE_c1m")));
    assert_ne!(rewritten, unit);
    std::fs::write(&copy, rewritten).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .current_dir(&dir.0)
        .output()
        .expect("systemd-analyze (package systemd)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze verify failed: {stderr}"
    );
    assert!(
        stderr.trim().is_empty(),
        "systemd-analyze verify warned: {stderr}"
    );

    // And the check has teeth: a misspelt directive is reported.
    std::fs::write(&copy, unit.replace("ProtectHome=yes", "ProtectHom=yes")).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .current_dir(&dir.0)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ProtectHom"), "typo not reported: {stderr}");
}

#[test]
fn default_config_file_starts_a_server() {
    let config = repo().join("dist/c1m.toml");
    let mut cmd = c1m();
    cmd.args(["serve", "--config"])
        .arg(&config)
        // Flags override the file: a loopback port and a small footprint for the test.
        .args([
            "--listen",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--max-conns",
            "1000",
        ]);
    let server = Server::spawn(cmd);
    let id = server.publish("pkg", b"hello");
    assert!(id > 0);
}

/// Builds the .deb (and its -dbgsym .ddeb) from the release binary this test run uses.
fn build_deb(out_dir: &Path) -> (PathBuf, PathBuf) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // --no-build: the release binary this test run was built with (target/release/c1m).
    let out = Command::new(cargo)
        .args(["deb", "-p", "c1m", "--no-build", "--fast", "--output"])
        .arg(out_dir)
        .current_dir(repo())
        .output()
        .expect("running cargo");
    assert!(
        out.status.success(),
        "cargo deb failed (cargo-deb is installed by scripts/install-test-deps.sh): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let find = |ext: &str| {
        std::fs::read_dir(out_dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == ext))
            .unwrap_or_else(|| panic!("no .{ext} in {}", out_dir.display()))
    };
    (find("deb"), find("ddeb"))
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// ELF section names of a file (`readelf -S`).
fn sections(path: &Path) -> Vec<String> {
    run(Command::new("readelf").arg("-SW").arg(path))
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let rest = l.strip_prefix('[')?.split_once(']')?.1;
            rest.split_whitespace().next().map(str::to_string)
        })
        .collect()
}

#[test]
fn deb_extracted_holds_a_working_install() {
    let out_dir = TempDir::new("deb");
    let (deb, ddeb) = build_deb(&out_dir.0);
    let root = out_dir.0.join("root");
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root));

    // Files and modes. The config is world-readable on purpose: the unit's DynamicUser must
    // read it, so it must hold no secret (the packaged one sets none).
    for (file, want) in [
        ("usr/bin/c1m", 0o755),
        ("etc/c1m/c1m.toml", 0o644),
        ("usr/lib/systemd/system/c1m.service", 0o644),
        ("usr/share/doc/c1m/README.md", 0o644),
        ("usr/share/doc/c1m/copyright", 0o644),
    ] {
        assert_eq!(mode(&root.join(file)), want, "mode of {file}");
    }
    let config = std::fs::read_to_string(root.join("etc/c1m/c1m.toml")).unwrap();
    assert!(
        !config.lines().any(|l| l.starts_with("publish_key")),
        "the world-readable config sets a secret"
    );
    let info = run(Command::new("dpkg-deb").arg("-I").arg(&deb));
    for script in ["postinst", "prerm", "postrm", "conffiles"] {
        assert!(info.contains(script), "no {script} in the package:\n{info}");
    }
    let conffiles = run(Command::new("dpkg-deb")
        .arg("-I")
        .arg(&deb)
        .arg("conffiles"));
    assert_eq!(conffiles.trim(), "/etc/c1m/c1m.toml");

    // The binary is stripped; the line tables went to the -dbgsym package.
    let bin = root.join("usr/bin/c1m");
    let shipped = sections(&bin);
    for debug in [".debug_info", ".debug_line"] {
        assert!(
            !shipped.iter().any(|s| s == debug),
            "the packaged binary carries {debug} ({} bytes)",
            std::fs::metadata(&bin).unwrap().len()
        );
    }
    let dbg_root = out_dir.0.join("dbgsym");
    run(Command::new("dpkg-deb").arg("-x").arg(&ddeb).arg(&dbg_root));
    let debug_file = run(Command::new("find")
        .arg(&dbg_root)
        .args(["-type", "f", "-name", "*.debug"]));
    let debug_file = debug_file
        .lines()
        .next()
        .expect("a .debug file in the dbgsym package");
    assert!(sections(Path::new(debug_file))
        .iter()
        .any(|s| s == ".debug_line"));

    // It runs from there, and is the binary under test.
    let version = run(Command::new(&bin).arg("--version"));
    assert!(version.starts_with("c1m 0."), "{version}");
    assert_eq!(version, run(c1m().arg("--version")));
    let mut cmd = Command::new(&bin);
    cmd.args(["serve", "--config"])
        .arg(root.join("etc/c1m/c1m.toml"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--max-conns",
            "1000",
        ]);
    let server = Server::spawn(cmd);
    assert!(server.publish("deb", b"hello") > 0);
    drop(server);

    // The unit, with its absolute paths moved into the extracted tree, verifies; its
    // Documentation= files are in the package.
    let unit = std::fs::read_to_string(root.join("usr/lib/systemd/system/c1m.service")).unwrap();
    let docs = unit
        .lines()
        .find_map(|l| l.strip_prefix("Documentation="))
        .expect("Documentation= in the unit");
    for url in docs.split_whitespace() {
        let path = url.strip_prefix("file:///").expect("a file:// URL");
        assert!(
            root.join(path).is_file(),
            "Documentation= {url} is not in the package"
        );
    }
    let moved = unit
        .replace("/usr/bin/c1m ", &format!("{} ", bin.display()))
        .replace("/etc/c1m/", &format!("{}/etc/c1m/", root.display()));
    let copy = out_dir.0.join("c1m.service");
    std::fs::write(&copy, moved).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .current_dir(&out_dir.0)
        .output()
        .expect("systemd-analyze (package systemd)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.trim().is_empty(), "{stderr}");

    // Every document the shipped docs link or name is shipped beside them.
    let doc_root = root.join("usr/share/doc/c1m");
    let missing = unresolved_doc_links(&doc_root);
    assert!(
        missing.is_empty(),
        "linked but not in the package: {missing:#?}"
    );
}

/// Links (`](target)`) to documents (.md, images, LICENSE files) and plain mentions of
/// `docs/NAME.md` or `NAME.md` in every .md under `doc_root` that do not resolve to a file
/// under it. Links to other repository files (dist/, Dockerfile, bench/) are left alone: they
/// are the source tree's, not documentation.
fn unresolved_doc_links(doc_root: &Path) -> Vec<String> {
    let files = run(Command::new("find").arg(doc_root).args(["-name", "*.md"]));
    let shipped: Vec<PathBuf> = files.lines().map(PathBuf::from).collect();
    let is_doc = |t: &str| {
        let t = t.split('#').next().unwrap_or("");
        t.ends_with(".md") || t.ends_with(".png") || t.contains("LICENSE")
    };
    let mut missing = Vec::new();
    for file in &shipped {
        let text = std::fs::read_to_string(file).unwrap();
        let dir = file.parent().unwrap();
        for link in text.split("](").skip(1) {
            let target = link.split([')', ' ']).next().unwrap_or("");
            let local = !target.contains("://") && !target.starts_with('#');
            if local && is_doc(target) {
                let path = dir.join(target.split('#').next().unwrap());
                if !path.exists() {
                    missing.push(format!("{}: ]({target})", file.display()));
                }
            }
        }
        for word in text.split(|c: char| c.is_whitespace() || "`()[],;:\"'*".contains(c)) {
            let word = word.trim_end_matches('.');
            let named = word.ends_with(".md") && !word.contains("://") && !word.contains('*');
            let source_tree = ["bench/", "crates/", "clients/js/src", "dist/", "scripts/"]
                .iter()
                .any(|p| word.starts_with(p));
            if !named || source_tree || word.contains("](") {
                continue;
            }
            // A bare name is found if any shipped document has it (PROTOCOL.md from docs/).
            let found = doc_root.join(word).exists()
                || dir.join(word).exists()
                || shipped.iter().any(|p| p.ends_with(word));
            if !found {
                missing.push(format!("{}: {word}", file.display()));
            }
        }
    }
    missing.sort();
    missing.dedup();
    missing
}

/// The suite checks the package without installing it: no test may run dpkg's install or
/// purge on the host (on a machine with c1m installed a purge deletes its /etc/c1m/c1m.toml).
#[test]
fn no_test_installs_or_removes_packages_on_the_host() {
    let tests = repo().join("crates");
    let files = run(Command::new("find")
        .arg(&tests)
        .args(["-path", "*/tests/*", "-name", "*.rs"]));
    // Built at run time so this file does not match itself.
    let dpkg = format!("Command::new(\"{}\")", "dpkg");
    let mut found = Vec::new();
    for file in files.lines() {
        let text = std::fs::read_to_string(file).unwrap();
        if text.contains(&dpkg) {
            found.push(file.to_string());
        }
    }
    assert!(
        found.is_empty(),
        "tests run dpkg (use dpkg-deb -x into a temp dir): {found:?}"
    );
}

/// References like `docs/PROTOCOL.md, "Limits and push-back"` in the packaged files name a
/// heading that exists (the start of its text).
#[test]
fn packaged_files_name_existing_doc_sections() {
    let mut checked = 0;
    for file in ["dist/c1m.service", "dist/c1m.toml"] {
        let text = std::fs::read_to_string(repo().join(file)).unwrap();
        for (i, _) in text.match_indices("docs/") {
            let rest = &text[i..];
            let Some((doc, after)) = rest.split_once(".md, \"") else {
                continue;
            };
            if doc.contains(char::is_whitespace) {
                continue;
            }
            let title = after.split('"').next().unwrap().replace("\n# ", " ");
            let doc_text = std::fs::read_to_string(repo().join(format!("{doc}.md"))).unwrap();
            assert!(
                doc_text
                    .lines()
                    .filter(|l| l.starts_with('#'))
                    .any(|l| l.trim_start_matches('#').trim().starts_with(&title)),
                "{file} names section {title:?} of {doc}.md, which has no such heading"
            );
            checked += 1;
        }
    }
    assert!(checked >= 3, "only {checked} section references found");
}
