//! Browser sessions (POST/GET/DELETE /sessions). Filled in by the sessions work.
