//! Request and response shapes of the contract, defined once and shared by
//! the server and the SDK. Field names are the contract's (camelCase).

pub mod account;
pub mod batch;
pub mod grid;
pub mod item;
pub mod job;
pub mod job_record;
pub mod proxy;
pub mod session;
