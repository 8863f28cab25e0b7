//! Leader election through a `coordination.k8s.io/v1` Lease, so that two virt-controller
//! replicas are safe: only the holder reconciles.
//!
//! The holder renews every `RENEW` seconds; another replica takes over once the Lease has not
//! been renewed for `DURATION` seconds. Every write carries the resourceVersion it read, so two
//! replicas cannot both win a race. A holder that cannot renew before its Lease would expire
//! stops the process: a restarted replica is safer than two leaders.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

const DURATION: i32 = 15;
const RENEW: u64 = 5;
const RETRY: u64 = 2;

/// A Lease held (or to be held) by `identity`.
pub struct LeaderLease {
    api: Api<Lease>,
    name: String,
    identity: String,
}

impl LeaderLease {
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str) -> Self {
        LeaderLease {
            api: Api::namespaced(client, namespace),
            name: name.into(),
            identity: identity.into(),
        }
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquire(&self) {
        loop {
            match self.try_acquire().await {
                Ok(true) => {
                    log::info!("leader lease {} acquired as {}", self.name, self.identity);
                    return;
                }
                Ok(false) => {}
                Err(e) => log::warn!("leader lease {}: {e}", self.name),
            }
            tokio::time::sleep(Duration::from_secs(RETRY)).await;
        }
    }

    /// Renews the Lease forever; exits the process when it cannot.
    pub async fn keep(self) {
        let mut last_renewed = std::time::Instant::now();
        loop {
            tokio::time::sleep(Duration::from_secs(RENEW)).await;
            match self.try_acquire().await {
                Ok(true) => last_renewed = std::time::Instant::now(),
                Ok(false) => {
                    log::error!("leader lease {} was taken over; exiting", self.name);
                    std::process::exit(1);
                }
                Err(e) => {
                    log::warn!("renewing leader lease {}: {e}", self.name);
                    if last_renewed.elapsed() > Duration::from_secs(DURATION as u64 - RENEW) {
                        log::error!("leader lease {} about to expire; exiting", self.name);
                        std::process::exit(1);
                    }
                }
            }
        }
    }

    /// One attempt: create, renew or take over the Lease. `Ok(false)`: someone else holds it.
    async fn try_acquire(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(DURATION),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let mine = spec.holder_identity.as_deref() == Some(self.identity.as_str());
        let duration =
            SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(DURATION)));
        let expired = spec
            .renew_time
            .as_ref()
            .is_none_or(|t| t.0 + duration < now);
        if !mine && !expired {
            return Ok(false);
        }
        if !mine {
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.renew_time = Some(MicroTime(now));
        spec.lease_duration_seconds = Some(DURATION);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}
