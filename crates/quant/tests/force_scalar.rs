//! `STATELM_FORCE_SCALAR=1` selects the scalar kernels for the process-wide
//! table. (Its own test binary: the table is built once per process.)

use statelm_quant::{active_isa, Kernels, FORCE_SCALAR_ENV};

#[test]
fn env_forces_scalar_kernels() {
    // The only test in this binary, run before anything builds the table.
    std::env::set_var(FORCE_SCALAR_ENV, "1");
    assert_eq!(active_isa(), "scalar");
    assert_eq!(Kernels::global().isa(), "scalar");
    // Explicit tables are unaffected.
    assert_eq!(Kernels::scalar().isa(), "scalar");
    let _ = Kernels::detected();
}
