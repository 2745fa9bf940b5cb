//! What the build and the repository hand out besides behaviour: every bench script can be run
//! as the docs show (`bench/NAME.sh`).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

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
