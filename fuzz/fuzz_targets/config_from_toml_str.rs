//! Feeds arbitrary bytes (as lossy UTF-8) to `Config::from_toml_str`: it must never panic, every error
//! must say something, and every accepted configuration must survive `to_toml_string` unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluicegate::config::Config;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match Config::from_toml_str(&text) {
        Ok(config) => {
            let written = config.to_toml_string();
            match Config::from_toml_str(&written) {
                Ok(reparsed) => assert_eq!(
                    reparsed, config,
                    "round trip changed the configuration of {text:?}; written as {written:?}"
                ),
                Err(error) => panic!(
                    "the written form of an accepted configuration is refused: {error}\n\
                     input: {text:?}\nwritten: {written:?}"
                ),
            }
        }
        Err(error) => assert!(
            !error.to_string().is_empty(),
            "empty error message for {text:?}"
        ),
    }
});
