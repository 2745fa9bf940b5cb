//! What the build and the repository hand out besides behaviour: the executable is linked as a
//! position-independent executable (ASLR for the image of a network-facing parser; the memory
//! it costs is measured in BENCHMARKS.md, "Linked as PIE"), and every bench script can be run
//! as the docs show (`bench/NAME.sh`).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// ELF `e_type` of a position-independent executable (and of a shared library).
const ET_DYN: u16 = 3;

#[test]
fn the_executable_is_position_independent() {
    let path = env!("CARGO_BIN_EXE_c1m");
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..4], b"\x7fELF", "{path} is not an ELF file");
    // e_type: the u16 after the 16-byte e_ident, little-endian on the targets c1m builds for.
    let e_type = u16::from_le_bytes([bytes[16], bytes[17]]);
    assert_eq!(
        e_type, ET_DYN,
        "{path} has ELF type {e_type} (2 = EXEC: linked -no-pie, its image is not randomized)"
    );
    // The same through binutils, as an operator would check it.
    let out = std::process::Command::new("readelf")
        .args(["-h", path])
        .output()
        .expect("readelf (package binutils)");
    let header = String::from_utf8_lossy(&out.stdout);
    assert!(
        header
            .lines()
            .any(|l| l.contains("Type:") && l.contains("DYN")),
        "{header}"
    );
}

#[test]
fn every_bench_script_is_executable() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench");
    let mut scripts = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "sh") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        if text.starts_with("#!") {
            scripts += 1;
            assert_eq!(
                mode & 0o111,
                0o111,
                "{} has mode {mode:o}: `chmod +x` it (and commit the mode)",
                path.display()
            );
        } else {
            // A library the scripts source (bench/lib.sh) says so and is not run on its own.
            assert!(
                text.lines().next().is_some_and(|l| l.contains("sourced")),
                "{} has no #! line and does not say it is sourced",
                path.display()
            );
        }
    }
    assert!(
        scripts >= 20,
        "only {scripts} bench scripts found in {}",
        dir.display()
    );
}
