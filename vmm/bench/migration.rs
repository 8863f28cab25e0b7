//! Live migration benchmark: the memtest guest (rewriting 4 MiB continuously) migrated between
//! two VMs in this process over a Unix socket pair, for several guest memory sizes. Prints, per
//! size, the medians of total time, downtime, pages sent and pre-copy rounds (round 0
//! included), and guest memory size over total time (zero pages are scanned, not sent).
//! Figures only, no assertions on time.
//!
//!     cargo bench -p vmm --bench migration [-- RUNS]

#[path = "../tests/common/mod.rs"]
mod common;

use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::{config, serial_log, wait_for_serial, Scratch};
use vmm::migration::MigrationOptions;
use vmm::vmm::Vmm;

fn median<T: Copy + Ord>(mut v: Vec<T>) -> T {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let runs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(5);
    println!("live migration of the memtest guest, {runs} runs per size (medians)");
    println!("memory  total       downtime    pages sent  rounds  memory/total");
    for mib in [64u64, 256, 1024] {
        let scratch = Scratch::new(&format!("bench-{mib}"));
        let mut totals = Vec::new();
        let mut downtimes = Vec::new();
        let mut pages = Vec::new();
        let mut rounds = Vec::new();
        for run in 0..runs {
            let serial = scratch.path(&format!("{run}-a.log"));
            let target_serial = scratch.path(&format!("{run}-b.log"));
            let mut cfg = config("memtest", &serial);
            cfg.memory.size = mib << 20;
            let source = vmm::builder::build_and_boot(&cfg).expect("boot the source");
            wait_for_serial(&serial, "GEN 00000001", |log| {
                log.contains("GEN 00000001 ok")
            });
            let (mut a, b) = UnixStream::pair().expect("socketpair");
            let mut target_cfg = config("memtest", &target_serial);
            target_cfg.memory.size = mib << 20;
            let target = std::thread::spawn(move || {
                let mut b = b;
                Vmm::restore_from(&target_cfg, &mut b)
            });
            let stats = source
                .send_migration(&mut a, &MigrationOptions::default())
                .expect("migrate");
            let mut target = target.join().expect("target thread").expect("restore");
            target.stop();
            assert!(!serial_log(&target_serial).contains("FAIL"));
            totals.push(stats.total);
            downtimes.push(stats.downtime);
            pages.push(stats.pages_sent);
            rounds.push(stats.precopy_rounds());
        }
        let total = median(totals);
        println!(
            "{mib:>4} MiB {:>10.1?} {:>10.2?} {:>11} {:>7}  {:.0} MiB/s",
            total,
            median(downtimes),
            median(pages),
            median(rounds),
            mib as f64 / total.max(Duration::from_micros(1)).as_secs_f64()
        );
    }
}
