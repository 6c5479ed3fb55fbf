//! The command line (`src/cli`): the contract, config discovery, first contact, generated files,
//! input errors, file modes.

pub(crate) mod config;
pub(crate) mod contract;
pub(crate) mod file_modes;
pub(crate) mod first_contact;
pub(crate) mod generate;
pub(crate) mod input_errors;
