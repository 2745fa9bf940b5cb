//! All Linux specifics behind safe functions: rlimits, socket options, process control,
//! /proc readers and netlink sock_diag. The only crate allowed `unsafe`; every block carries a
//! `// SAFETY:` note.
