//! SNMP counters with Linux MIB names (`nstat` spelling: `TcpInSegs`, `TcpExtDelayedACKs`).
//!
//! [`Mib`] indexes a fixed array of `u64` in [`Counters`]; increment on the hot path is an index.

macro_rules! mibs {
    ($( $variant:ident = $name:literal ),* $(,)?) => {
        /// One counter. The doc of each is its `nstat` name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[allow(missing_docs)]
        pub enum Mib { $( #[doc = $name] $variant, )* }
        /// `nstat` names, in [`Mib`] order.
        pub const MIB_NAMES: &[&str] = &[ $( $name, )* ];
        const MIB_COUNT: usize = MIB_NAMES.len();
    };
}

mibs! {
    ActiveOpens = "TcpActiveOpens",
    PassiveOpens = "TcpPassiveOpens",
    AttemptFails = "TcpAttemptFails",
    EstabResets = "TcpEstabResets",
    CurrEstab = "TcpCurrEstab",
    InSegs = "TcpInSegs",
    OutSegs = "TcpOutSegs",
    RetransSegs = "TcpRetransSegs",
    InErrs = "TcpInErrs",
    OutRsts = "TcpOutRsts",
    InCsumErrors = "TcpInCsumErrors",
    SyncookiesSent = "TcpExtSyncookiesSent",
    SyncookiesRecv = "TcpExtSyncookiesRecv",
    SyncookiesFailed = "TcpExtSyncookiesFailed",
    EmbryonicRsts = "TcpExtEmbryonicRsts",
    OutOfWindowIcmps = "TcpExtOutOfWindowIcmps",
    TW = "TcpExtTW",
    TWRecycled = "TcpExtTWRecycled",
    PAWSEstab = "TcpExtPAWSEstab",
    PAWSActive = "TcpExtPAWSActive",
    PAWSOldAck = "TcpExtPAWSOldAck",
    DelayedACKs = "TcpExtDelayedACKs",
    DelayedACKLocked = "TcpExtDelayedACKLocked",
    DelayedACKLost = "TcpExtDelayedACKLost",
    ListenOverflows = "TcpExtListenOverflows",
    ListenDrops = "TcpExtListenDrops",
    TCPHPHits = "TcpExtTCPHPHits",
    TCPPureAcks = "TcpExtTCPPureAcks",
    TCPHPAcks = "TcpExtTCPHPAcks",
    TCPRenoRecovery = "TcpExtTCPRenoRecovery",
    TCPSackRecovery = "TcpExtTCPSackRecovery",
    TCPSACKReneging = "TcpExtTCPSACKReneging",
    TCPSACKReorder = "TcpExtTCPSACKReorder",
    TCPRenoReorder = "TcpExtTCPRenoReorder",
    TCPTSReorder = "TcpExtTCPTSReorder",
    TCPFullUndo = "TcpExtTCPFullUndo",
    TCPPartialUndo = "TcpExtTCPPartialUndo",
    TCPDSACKUndo = "TcpExtTCPDSACKUndo",
    TCPLossUndo = "TcpExtTCPLossUndo",
    TCPLostRetransmit = "TcpExtTCPLostRetransmit",
    TCPRenoFailures = "TcpExtTCPRenoFailures",
    TCPSackFailures = "TcpExtTCPSackFailures",
    TCPLossFailures = "TcpExtTCPLossFailures",
    TCPFastRetrans = "TcpExtTCPFastRetrans",
    TCPSlowStartRetrans = "TcpExtTCPSlowStartRetrans",
    TCPRetransFail = "TcpExtTCPRetransFail",
    TCPMTUPSuccess = "TcpExtTCPMTUPSuccess",
    TCPMTUPFail = "TcpExtTCPMTUPFail",
    TCPTimeouts = "TcpExtTCPTimeouts",
    TCPLossProbes = "TcpExtTCPLossProbes",
    TCPLossProbeRecovery = "TcpExtTCPLossProbeRecovery",
    TCPRenoRecoveryFail = "TcpExtTCPRenoRecoveryFail",
    TCPSackRecoveryFail = "TcpExtTCPSackRecoveryFail",
    TCPRcvCollapsed = "TcpExtTCPRcvCollapsed",
    TCPDSACKOldSent = "TcpExtTCPDSACKOldSent",
    TCPDSACKOfoSent = "TcpExtTCPDSACKOfoSent",
    TCPDSACKRecv = "TcpExtTCPDSACKRecv",
    TCPDSACKOfoRecv = "TcpExtTCPDSACKOfoRecv",
    TCPAbortOnData = "TcpExtTCPAbortOnData",
    TCPAbortOnClose = "TcpExtTCPAbortOnClose",
    TCPAbortOnMemory = "TcpExtTCPAbortOnMemory",
    TCPAbortOnTimeout = "TcpExtTCPAbortOnTimeout",
    TCPAbortOnLinger = "TcpExtTCPAbortOnLinger",
    TCPAbortFailed = "TcpExtTCPAbortFailed",
    TCPMemoryPressures = "TcpExtTCPMemoryPressures",
    TCPMemoryPressuresChrono = "TcpExtTCPMemoryPressuresChrono",
    PruneCalled = "TcpExtPruneCalled",
    TCPSpuriousRTOs = "TcpExtTCPSpuriousRTOs",
    TCPSACKDiscard = "TcpExtTCPSACKDiscard",
    TCPDSACKIgnoredOld = "TcpExtTCPDSACKIgnoredOld",
    TCPDSACKIgnoredNoUndo = "TcpExtTCPDSACKIgnoredNoUndo",
    TCPRcvCoalesce = "TcpExtTCPRcvCoalesce",
    TCPOFOQueue = "TcpExtTCPOFOQueue",
    TCPOFODrop = "TcpExtTCPOFODrop",
    TCPOFOMerge = "TcpExtTCPOFOMerge",
    TCPChallengeACK = "TcpExtTCPChallengeACK",
    TCPSYNChallenge = "TcpExtTCPSYNChallenge",
    TCPSpuriousRtxHostQueues = "TcpExtTCPSpuriousRtxHostQueues",
    TCPAutoCorking = "TcpExtTCPAutoCorking",
    TCPMD5NotFound = "TcpExtTCPMD5NotFound",
    TCPMD5Unexpected = "TcpExtTCPMD5Unexpected",
    TCPMD5Failure = "TcpExtTCPMD5Failure",
    TCPFastOpenActive = "TcpExtTCPFastOpenActive",
    TCPFastOpenActiveFail = "TcpExtTCPFastOpenActiveFail",
    TCPFastOpenPassive = "TcpExtTCPFastOpenPassive",
    TCPFastOpenPassiveFail = "TcpExtTCPFastOpenPassiveFail",
    TCPFastOpenListenOverflow = "TcpExtTCPFastOpenListenOverflow",
    TCPFastOpenCookieReqd = "TcpExtTCPFastOpenCookieReqd",
    TCPFastOpenBlackhole = "TcpExtTCPFastOpenBlackhole",
    TCPFastOpenPassiveAltKey = "TcpExtTCPFastOpenPassiveAltKey",
    TCPFromZeroWindowAdv = "TcpExtTCPFromZeroWindowAdv",
    TCPToZeroWindowAdv = "TcpExtTCPToZeroWindowAdv",
    TCPWantZeroWindowAdv = "TcpExtTCPWantZeroWindowAdv",
    TCPSynRetrans = "TcpExtTCPSynRetrans",
    TCPOrigDataSent = "TcpExtTCPOrigDataSent",
    TCPACKSkippedSynRecv = "TcpExtTCPACKSkippedSynRecv",
    TCPACKSkippedPAWS = "TcpExtTCPACKSkippedPAWS",
    TCPACKSkippedSeq = "TcpExtTCPACKSkippedSeq",
    TCPACKSkippedChallenge = "TcpExtTCPACKSkippedChallenge",
    TCPWinProbe = "TcpExtTCPWinProbe",
    TCPKeepAlive = "TcpExtTCPKeepAlive",
    TCPDelivered = "TcpExtTCPDelivered",
    TCPAckCompressed = "TcpExtTCPAckCompressed",
    TCPZeroWindowDrop = "TcpExtTCPZeroWindowDrop",
    TCPRcvQDrop = "TcpExtTCPRcvQDrop",
    TCPWqueueTooBig = "TcpExtTCPWqueueTooBig",
    TCPBacklogCoalesce = "TcpExtTCPBacklogCoalesce",
    TCPBacklogDrop = "TcpExtTCPBacklogDrop",
    BeyondWindow = "TcpExtBeyondWindow",
    TCPRcvPruned = "TcpExtRcvPruned",
    TCPDSACKRecvSegs = "TcpExtTCPDSACKRecvSegs",
}

/// The counters of one stack (netns).
#[derive(Clone, Debug)]
pub struct Counters {
    v: [u64; MIB_COUNT],
}

impl Default for Counters {
    fn default() -> Self {
        Counters { v: [0; MIB_COUNT] }
    }
}

impl Counters {
    /// Add one.
    #[inline]
    pub fn inc(&mut self, m: Mib) {
        self.add(m, 1);
    }
    /// Add `n`.
    #[inline]
    pub fn add(&mut self, m: Mib, n: u64) {
        let c = &mut self.v[m as usize];
        *c = c.wrapping_add(n);
    }
    /// Subtract `n` (gauges such as `TcpCurrEstab`), saturating at 0.
    #[inline]
    pub fn sub(&mut self, m: Mib, n: u64) {
        let c = &mut self.v[m as usize];
        *c = c.saturating_sub(n);
    }
    /// Value of a counter.
    #[inline]
    pub fn value(&self, m: Mib) -> u64 {
        self.v[m as usize]
    }
    /// Value by `nstat` name (`TcpExtDelayedACKs`); the `TcpExt`/`Tcp` prefix may be omitted.
    pub fn get(&self, name: &str) -> Option<u64> {
        MIB_NAMES
            .iter()
            .position(|n| {
                *n == name
                    || n.strip_prefix("TcpExt") == Some(name)
                    || (n.starts_with("Tcp") && !n.starts_with("TcpExt") && &n[3..] == name)
            })
            .map(|i| self.v[i])
    }
    /// All counters as `(name, value)`, in table order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        MIB_NAMES.iter().copied().zip(self.v.iter().copied())
    }
    /// An `nstat -az`-style table: one `Name  value` line per counter (zeros included when `all`).
    pub fn nstat(&self, all: bool) -> String {
        let mut s = String::from("#kernel\n");
        for (n, v) in self.iter() {
            if all || v != 0 {
                s.push_str(&format!("{n:<32}{v:>16}{:>12}\n", "0.0"));
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn get_by_name() {
        let mut c = Counters::default();
        c.inc(Mib::DelayedACKs);
        c.add(Mib::InSegs, 5);
        assert_eq!(c.get("TcpExtDelayedACKs"), Some(1));
        assert_eq!(c.get("DelayedACKs"), Some(1));
        assert_eq!(c.get("TcpInSegs"), Some(5));
        assert_eq!(c.get("InSegs"), Some(5));
        assert_eq!(c.get("Nope"), None);
        assert!(c.nstat(false).contains("TcpExtDelayedACKs"));
        assert!(!c.nstat(false).contains("TcpOutRsts"));
        assert!(c.nstat(true).contains("TcpOutRsts"));
    }
}
