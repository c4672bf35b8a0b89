//! Module parameters of the algorithms (Linux `/sys/module/<module>/parameters/<name>`).

use thiserror::Error;

/// Linux errno `ENOENT`.
const ENOENT: i32 = 2;
/// Linux errno `EINVAL`.
const EINVAL: i32 = 22;

/// Why a module parameter could not be read or written.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ParamError {
    /// No such module or parameter (Linux: the sysfs file does not exist, `ENOENT`).
    #[error("no such congestion control parameter: {0}")]
    Unknown(String),
    /// The value is not an integer or out of the accepted range (Linux `EINVAL`).
    #[error("invalid value {value:?} for {name}: {reason}")]
    Invalid {
        /// Parameter name.
        name: String,
        /// The value as given.
        value: String,
        /// What is accepted.
        reason: &'static str,
    },
}

impl ParamError {
    /// The Linux errno a write to the sysfs file would have failed with.
    pub fn errno(&self) -> i32 {
        match self {
            ParamError::Unknown(_) => ENOENT,
            ParamError::Invalid { .. } => EINVAL,
        }
    }
}

/// Module parameters of every built-in algorithm, as a host's engine holds them (on Linux
/// they are global per kernel; here they are per [`crate::by_name`] call, i.e. per
/// connection creation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CcParams {
    /// `tcp_cubic` module parameters.
    pub cubic: CubicParams,
}

impl CcParams {
    /// Writes `/sys/module/<module>/parameters/<name>`. `module` is the Linux module name
    /// (`"tcp_cubic"`). Reno has no parameters.
    pub fn set_module_param(
        &mut self,
        module: &str,
        name: &str,
        value: &str,
    ) -> Result<(), ParamError> {
        match module {
            "tcp_cubic" => self.cubic.set_param(name, value),
            _ => Err(ParamError::Unknown(format!("{module}/{name}"))),
        }
    }

    /// Reads `/sys/module/<module>/parameters/<name>` (decimal, without newline).
    pub fn get_module_param(&self, module: &str, name: &str) -> Result<String, ParamError> {
        match module {
            "tcp_cubic" => self.cubic.get_param(name),
            _ => Err(ParamError::Unknown(format!("{module}/{name}"))),
        }
    }

    /// Writes a parameter by its sysfs path, e.g.
    /// `/sys/module/tcp_cubic/parameters/hystart_detect` (what packetdrill scripts `echo` into).
    pub fn write_sysfs(&mut self, path: &str, value: &str) -> Result<(), ParamError> {
        let (module, name) = split_sysfs(path)?;
        self.set_module_param(module, name, value)
    }

    /// Reads a parameter by its sysfs path.
    pub fn read_sysfs(&self, path: &str) -> Result<String, ParamError> {
        let (module, name) = split_sysfs(path)?;
        self.get_module_param(module, name)
    }
}

fn split_sysfs(path: &str) -> Result<(&str, &str), ParamError> {
    let rest = path
        .strip_prefix("/sys/module/")
        .ok_or_else(|| ParamError::Unknown(path.to_string()))?;
    let (module, name) = rest
        .split_once("/parameters/")
        .ok_or_else(|| ParamError::Unknown(path.to_string()))?;
    if module.is_empty() || name.is_empty() || name.contains('/') {
        return Err(ParamError::Unknown(path.to_string()));
    }
    Ok((module, name))
}

/// `tcp_cubic` module parameters, defaults as in Linux 6.x.
///
/// Linux's flag parameters are `int`s; here they are `bool` (any non-zero write is true).
/// Unlike Linux, the derived constants (`beta_scale`, `cube_rtt_scale`, `cube_factor`) are
/// computed from these values when a [`crate::Cubic`] is created, so `beta` and
/// `bic_scale` changes take effect for new connections (Linux computes them once at module
/// load).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CubicParams {
    /// `fast_convergence` (default on): after a loss below the previous maximum, remember a
    /// lower W_max so the flow yields to newer flows (RFC 9438 §4.7).
    pub fast_convergence: bool,
    /// `beta` (default 717): multiplicative decrease factor in 1/1024 units (717/1024 ≈ 0.7,
    /// RFC 9438 §4.6). Accepted range 0..=1023.
    pub beta: u32,
    /// `initial_ssthresh` (default 0 = none): initial slow-start threshold in packets, used
    /// only when `hystart` is off.
    pub initial_ssthresh: u32,
    /// `bic_scale` (default 41): the cubic constant C in 1/1024 units divided by 10
    /// (C = 41 × 10 / 1024 ≈ 0.4, RFC 9438 §5.1). Must be at least 1.
    pub bic_scale: u32,
    /// `tcp_friendliness` (default on): never grow slower than an emulated Reno flow
    /// (RFC 9438 §4.3).
    pub tcp_friendliness: bool,
    /// `hystart` (default on): use HyStart to leave slow start before losses.
    pub hystart: bool,
    /// `hystart_detect` (default 3): bitmask of HyStart detectors, 1 = ACK train,
    /// 2 = delay increase. Accepted range 0..=3.
    pub hystart_detect: u32,
    /// `hystart_low_window` (default 16): HyStart acts only once cwnd reaches this many
    /// packets.
    pub hystart_low_window: u32,
    /// `hystart_ack_delta_us` (default 2000): ACKs closer than this (µs) belong to one ACK
    /// train.
    pub hystart_ack_delta_us: u32,
}

impl Default for CubicParams {
    fn default() -> Self {
        CubicParams {
            fast_convergence: true,
            beta: 717,
            initial_ssthresh: 0,
            bic_scale: 41,
            tcp_friendliness: true,
            hystart: true,
            hystart_detect: 3,
            hystart_low_window: 16,
            hystart_ack_delta_us: 2000,
        }
    }
}

/// HyStart detector bit: ACK train (`HYSTART_ACK_TRAIN`).
pub(crate) const HYSTART_ACK_TRAIN: u32 = 0x1;
/// HyStart detector bit: delay increase (`HYSTART_DELAY`).
pub(crate) const HYSTART_DELAY: u32 = 0x2;

impl CubicParams {
    /// Names of the parameters, as in `/sys/module/tcp_cubic/parameters/`.
    pub const NAMES: &'static [&'static str] = &[
        "fast_convergence",
        "beta",
        "initial_ssthresh",
        "bic_scale",
        "tcp_friendliness",
        "hystart",
        "hystart_detect",
        "hystart_low_window",
        "hystart_ack_delta_us",
    ];

    /// Sets parameter `name` from its text form, as a write to
    /// `/sys/module/tcp_cubic/parameters/<name>` would: an integer in C notation (`12`,
    /// `0x1f`, `017`), optionally followed by one newline.
    ///
    /// Errors: unknown name → [`ParamError::Unknown`] (`ENOENT`); not an integer, negative,
    /// or outside the range the parameter's doc states → [`ParamError::Invalid`]
    /// (`EINVAL`). On error nothing changes.
    pub fn set_param(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        if !Self::NAMES.contains(&name) {
            return Err(ParamError::Unknown(name.to_string()));
        }
        let invalid = |reason: &'static str| ParamError::Invalid {
            name: name.to_string(),
            value: value.to_string(),
            reason,
        };
        let v = parse_c_uint(value).ok_or_else(|| invalid("a non-negative 32-bit integer"))?;
        match name {
            "fast_convergence" => self.fast_convergence = v != 0,
            "beta" => {
                if v >= 1024 {
                    return Err(invalid("0..=1023 (units of 1/1024)"));
                }
                self.beta = v;
            }
            "initial_ssthresh" => self.initial_ssthresh = v,
            "bic_scale" => {
                if v == 0 || v > u32::MAX / 10 {
                    return Err(invalid("1..=429496729"));
                }
                self.bic_scale = v;
            }
            "tcp_friendliness" => self.tcp_friendliness = v != 0,
            "hystart" => self.hystart = v != 0,
            "hystart_detect" => {
                if v > (HYSTART_ACK_TRAIN | HYSTART_DELAY) {
                    return Err(invalid("0..=3 (1 = ACK train, 2 = delay)"));
                }
                self.hystart_detect = v;
            }
            "hystart_low_window" => self.hystart_low_window = v,
            "hystart_ack_delta_us" => {
                if v > i32::MAX as u32 {
                    return Err(invalid("0..=2147483647"));
                }
                self.hystart_ack_delta_us = v;
            }
            _ => return Err(ParamError::Unknown(name.to_string())),
        }
        Ok(())
    }

    /// Reads parameter `name` as sysfs shows it (decimal; flags as `0`/`1`).
    pub fn get_param(&self, name: &str) -> Result<String, ParamError> {
        let v = match name {
            "fast_convergence" => u32::from(self.fast_convergence),
            "beta" => self.beta,
            "initial_ssthresh" => self.initial_ssthresh,
            "bic_scale" => self.bic_scale,
            "tcp_friendliness" => u32::from(self.tcp_friendliness),
            "hystart" => u32::from(self.hystart),
            "hystart_detect" => self.hystart_detect,
            "hystart_low_window" => self.hystart_low_window,
            "hystart_ack_delta_us" => self.hystart_ack_delta_us,
            _ => return Err(ParamError::Unknown(name.to_string())),
        };
        Ok(v.to_string())
    }
}

/// Parses an unsigned integer the way the kernel's `kstrtoint(s, 0, ..)` reads a module
/// parameter: optional `+`, then `0x`/`0X` hex, leading-`0` octal or decimal, then at most
/// one trailing newline. Negative values are refused here.
fn parse_c_uint(s: &str) -> Option<u32> {
    let s = s.strip_suffix('\n').unwrap_or(s);
    let s = s.strip_prefix('+').unwrap_or(s);
    let (digits, radix) = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u32::from_str_radix(digits, radix).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_linux_6() {
        let p = CubicParams::default();
        assert!(p.fast_convergence && p.tcp_friendliness && p.hystart);
        assert_eq!((p.beta, p.bic_scale, p.initial_ssthresh), (717, 41, 0));
        assert_eq!(
            (
                p.hystart_detect,
                p.hystart_low_window,
                p.hystart_ack_delta_us
            ),
            (3, 16, 2000)
        );
    }

    #[test]
    fn set_and_get_every_name() {
        let mut p = CubicParams::default();
        for name in CubicParams::NAMES {
            p.set_param(name, "1").unwrap();
            assert_eq!(p.get_param(name).unwrap(), "1", "{name}");
        }
    }

    #[test]
    fn parses_like_kstrtoint() {
        let mut p = CubicParams::default();
        p.set_param("hystart_detect", "2\n").unwrap();
        assert_eq!(p.hystart_detect, 2);
        p.set_param("hystart_low_window", "0x20").unwrap();
        assert_eq!(p.hystart_low_window, 32);
        p.set_param("hystart_low_window", "010").unwrap();
        assert_eq!(p.hystart_low_window, 8);
        p.set_param("beta", "+512").unwrap();
        assert_eq!(p.beta, 512);
        p.set_param("fast_convergence", "0").unwrap();
        assert!(!p.fast_convergence);
        p.set_param("fast_convergence", "7").unwrap();
        assert!(p.fast_convergence);
    }

    #[test]
    fn rejects_bad_values_with_einval_and_keeps_old_value() {
        let mut p = CubicParams::default();
        for (name, value) in [
            ("beta", "1024"),
            ("bic_scale", "0"),
            ("hystart_detect", "4"),
            ("hystart", "-1"),
            ("hystart", "yes"),
            ("hystart", ""),
            ("hystart_low_window", "08"),
            ("hystart_ack_delta_us", "4294967295"),
            ("initial_ssthresh", "4294967296"),
            ("hystart", "1\n\n"),
        ] {
            let e = p.set_param(name, value).unwrap_err();
            assert_eq!(e.errno(), EINVAL, "{name}={value:?}");
        }
        assert_eq!(p, CubicParams::default());
    }

    #[test]
    fn unknown_names_are_enoent() {
        let mut p = CubicParams::default();
        assert_eq!(p.set_param("hystart_foo", "1").unwrap_err().errno(), ENOENT);
        assert_eq!(p.get_param("hystart_foo").unwrap_err().errno(), ENOENT);
    }

    #[test]
    fn sysfs_paths() {
        let mut cc = CcParams::default();
        cc.write_sysfs("/sys/module/tcp_cubic/parameters/hystart_detect", "1\n")
            .unwrap();
        assert_eq!(cc.cubic.hystart_detect, 1);
        assert_eq!(
            cc.read_sysfs("/sys/module/tcp_cubic/parameters/hystart_detect")
                .unwrap(),
            "1"
        );
        assert_eq!(
            cc.write_sysfs("/sys/module/tcp_bbr/parameters/x", "1")
                .unwrap_err()
                .errno(),
            ENOENT
        );
        assert_eq!(
            cc.write_sysfs("/proc/sys/net/ipv4/tcp_foo", "1")
                .unwrap_err()
                .errno(),
            ENOENT
        );
        assert_eq!(
            cc.write_sysfs("/sys/module/tcp_cubic/parameters/", "1")
                .unwrap_err()
                .errno(),
            ENOENT
        );
    }
}
