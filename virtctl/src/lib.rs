//! virtctl: start, stop, restart, pause, unpause, console, migrate, guestosinfo, version.
//! Not written yet (issue "virt-api and virtctl").
#![forbid(unsafe_code)]
