//! The one door from doctor to the tune parameter table and calculator: what the target needs
//! for a key. Doctor never restates a number of its own; without `--conns`, or for a key the
//! plan does not size (role, conntrack not loaded), the comparison is simply not made.
//!
//! Like `c1m tune --check`, a live value is judged against the plan's `need` (the least the
//! target requires) and the fix writes the plan's `value` (need raised to the kernel default).

use super::Ctx;
use crate::params::Role;
use crate::root::Root;
use crate::tune::calc::{self, Plan};
use anyhow::Result;

/// What the plan wants for one key, as the integers the sysctl holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want {
    pub need: Vec<u64>,
    pub value: Vec<u64>,
}

impl Want {
    /// The first (usually only) number of `need`.
    pub fn need1(&self) -> u64 {
        self.need.first().copied().unwrap_or(0)
    }
    /// The first number of `value`.
    pub fn value1(&self) -> u64 {
        self.value.first().copied().unwrap_or(0)
    }
    /// `value` as the sysctl writes it (`"a b c"`).
    pub fn value_str(&self) -> String {
        let v: Vec<String> = self.value.iter().map(|n| n.to_string()).collect();
        v.join(" ")
    }
}

/// The tune plan for `conns` connections in `role` on the box under `root` (RAM, CPUs, page
/// size read from it; one page buffered per connection, tune's default).
pub fn plan_for(root: &Root, conns: u64, role: Role) -> Result<Plan> {
    let host = crate::tune::host(root, "auto")?;
    Ok(calc::plan(
        host,
        calc::Target {
            conns,
            role,
            buffered: host.page_size,
        },
    ))
}

fn nums(s: &str) -> Option<Vec<u64>> {
    s.split_whitespace().map(|w| w.parse().ok()).collect()
}

/// What the ctx's plan wants for `key`, when it has a plan and sizes the key.
pub fn recommended(ctx: &Ctx, key: &str) -> Option<Want> {
    let plan = ctx.plan.as_ref()?;
    Some(Want {
        need: nums(plan.need(key)?)?,
        value: nums(plan.value(key)?)?,
    })
}
