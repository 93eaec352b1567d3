//! SIGUSR1/SIGUSR2 forwarding (its own test binary: it installs process-wide handlers).
#![cfg(unix)]

use std::time::Duration;

use statelm_governor::{install_sigusr1, HostSignal, MemorySource, PressureLevel};

fn send(signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &std::process::id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
}

#[test]
fn sigusr1_warns_and_sigusr2_is_critical() {
    let signal = HostSignal::new();
    let mut source = signal.source();
    let forwarder = install_sigusr1(signal.clone()).unwrap();
    send("-USR1");
    assert_eq!(
        source.wait(Duration::from_secs(5)).unwrap(),
        Some(PressureLevel::Warning)
    );
    send("-USR2");
    assert_eq!(
        source.wait(Duration::from_secs(5)).unwrap(),
        Some(PressureLevel::Critical)
    );
    assert_eq!(source.read().unwrap().level, PressureLevel::Critical);
    drop(forwarder);
}
