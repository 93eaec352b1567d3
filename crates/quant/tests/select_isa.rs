//! `STATELM_ISA` selects a table of `Kernels::available()` for the process-wide
//! table. (Its own test binary: the table is built once per process.)

use statelm_quant::{active_isa, Kernels, ISA_ENV};

#[test]
fn env_selects_an_available_table() {
    // The only test in this binary, run before anything builds the table.
    let all = Kernels::available();
    // The second-best table if there is one (the best is the default anyway).
    let pick = all[all.len().saturating_sub(2)].isa();
    std::env::set_var(ISA_ENV, pick);
    assert_eq!(active_isa(), pick);
    assert_eq!(Kernels::global().isa(), pick);
}
