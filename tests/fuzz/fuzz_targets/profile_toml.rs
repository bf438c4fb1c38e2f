//! A device profile, as every command that takes `--device` reads it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfmodel::collect::DeviceProfile;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(profile) = DeviceProfile::parse(text, "fuzz", Path::new("collectors/fuzz.toml")) {
        // What is derived from a profile before anything is measured.
        let _ = profile.check_host(perfmodel::device::Fingerprint::of_host());
    }
});
