//! The nf_tables socket's filter: a classic BPF program the kernel runs on each notification
//! before it is queued, which drops those of kube-proxy's own commits but their NEWGEN.
//!
//! Why: kube-proxy's partial sync at 2,000 Services notifies about 6,000 changes each second;
//! copying them out of the kernel was a third of the watching agent's CPU (docs/benchmarks.md),
//! for commits whose writer the NEWGEN names anyway. The kernel queues a commit's changes in
//! datagrams of that commit alone and sends its NEWGEN in one of its own
//! (net/netfilter/nf_tables_api.c: `nft_notify_enqueue`, `nf_tables_gen_notify`), every message
//! with `nlmsg_pid` set to the committing socket's port id: under autobind, the first socket of a
//! process gets its PID (net/netlink/af_netlink.c: `netlink_autobind`), as `iptables-restore`
//! and `nft -f -` (libmnl's `MNL_SOCKET_AUTOPID`) do. So the program looks at a datagram's
//! first message: a NEWGEN passes; one whose port id is one of the PIDs given is dropped; the
//! rest passes. The PIDs are kube-proxy's children the process events saw forked
//! ([`super::proc_events`]), before they commit.
//!
//! What may go wrong fails safe: a port id that is no PID (a second socket, or a PID taken)
//! passes; a filter set after a child's first datagrams leaves them read. The program is built
//! here (pure, tested on messages); [`attach`] is the one `unsafe` call (setsockopt).

use std::os::fd::{AsRawFd, BorrowedFd};

use crate::netlink::nft_uapi::{NFNL_SUBSYS_NFTABLES, NFT_MSG_NEWGEN};

/// PIDs one program names at most: kube-proxy and its 15 newest children (it runs its
/// commands one at a time; the kernel compiles the program again at each change, so shorter
/// is cheaper; its jumps are 8-bit, so 250 at most).
pub const MAX_PIDS: usize = 16;

/// One cBPF instruction, as `struct sock_filter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

const LD_H_ABS: u16 = 0x28; // BPF_LD | BPF_H | BPF_ABS
const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K

/// `struct nlmsghdr`: nlmsg_type at 4 (u16), nlmsg_pid at 12 (u32), in host order.
const TYPE_AT: u32 = 4;
const PID_AT: u32 = 12;

/// cBPF's absolute loads read in network order; netlink's fields are in host order: the
/// constants compared with are the host bytes read big-endian.
fn as_loaded16(v: u16) -> u32 {
    u16::from_be_bytes(v.to_ne_bytes()).into()
}

fn as_loaded32(v: u32) -> u32 {
    u32::from_be_bytes(v.to_ne_bytes())
}

/// The program for `pids` (the first [`MAX_PIDS`]): drop a datagram whose first message is no
/// NEWGEN and comes from one of them, pass the rest whole.
pub fn program(pids: &[u32]) -> Vec<Insn> {
    let pids = &pids[..pids.len().min(MAX_PIDS)];
    let n = pids.len() as u8;
    let newgen = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWGEN;
    let mut p = vec![
        Insn {
            code: LD_H_ABS,
            jt: 0,
            jf: 0,
            k: TYPE_AT,
        },
        // To the pass at 3 + n.
        Insn {
            code: JEQ_K,
            jt: n + 1,
            jf: 0,
            k: as_loaded16(newgen),
        },
        Insn {
            code: LD_W_ABS,
            jt: 0,
            jf: 0,
            k: PID_AT,
        },
    ];
    for (i, pid) in pids.iter().enumerate() {
        // From 3 + i to the drop at 4 + n.
        p.push(Insn {
            code: JEQ_K,
            jt: n - i as u8,
            jf: 0,
            k: as_loaded32(*pid),
        });
    }
    p.push(Insn {
        code: RET_K,
        jt: 0,
        jf: 0,
        k: u32::MAX,
    });
    p.push(Insn {
        code: RET_K,
        jt: 0,
        jf: 0,
        k: 0,
    });
    p
}

/// Sets `program` on `fd` (replacing the one before, atomically); an empty program takes the
/// filter off.
pub fn attach(fd: BorrowedFd<'_>, program: &[Insn]) -> std::io::Result<()> {
    if program.is_empty() {
        return detach(fd);
    }
    let mut insns: Vec<libc::sock_filter> = program
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect();
    let prog = libc::sock_fprog {
        len: insns.len() as u16,
        filter: insns.as_mut_ptr(),
    };
    setsockopt(fd, libc::SO_ATTACH_FILTER, &prog)
}

/// Takes the filter off `fd` (none on it: not an error).
pub fn detach(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    match setsockopt(fd, libc::SO_DETACH_FILTER, &0i32) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        r => r,
    }
}

#[allow(unsafe_code)]
fn setsockopt<T>(fd: BorrowedFd<'_>, name: libc::c_int, value: &T) -> std::io::Result<()> {
    // SAFETY: `value` is a live reference to a `T` of `size_of::<T>()` bytes for the whole call
    // (for SO_ATTACH_FILTER a `sock_fprog` whose `filter` points at `len` instructions owned by
    // the caller's frame); the kernel copies what it reads and keeps no pointer; `fd` is open
    // for the call's duration (borrowed).
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `p` on `pkt` as the kernel's interpreter would for these four instructions: the
    /// bytes kept (0: dropped); an out-of-bounds load drops, as in the kernel.
    fn run(p: &[Insn], pkt: &[u8]) -> u32 {
        let mut a: u32 = 0;
        let mut pc = 0usize;
        loop {
            let i = p[pc];
            pc += 1;
            match i.code {
                LD_H_ABS => match pkt.get(i.k as usize..i.k as usize + 2) {
                    Some(b) => a = u16::from_be_bytes([b[0], b[1]]).into(),
                    None => return 0,
                },
                LD_W_ABS => match pkt.get(i.k as usize..i.k as usize + 4) {
                    Some(b) => a = u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
                    None => return 0,
                },
                JEQ_K => pc += if a == i.k { i.jt } else { i.jf } as usize,
                RET_K => return i.k,
                c => panic!("unexpected opcode {c:#x}"),
            }
        }
    }

    fn msg(ty: u16, pid: u32) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&20u32.to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&7u32.to_ne_bytes());
        m.extend_from_slice(&pid.to_ne_bytes());
        m.extend_from_slice(&[2, 0, 0, 0]);
        m
    }

    const NEWRULE: u16 = (NFNL_SUBSYS_NFTABLES << 8) | 6;
    const NEWGEN: u16 = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWGEN;

    #[test]
    fn drops_the_changes_of_the_pids_given_and_keeps_every_newgen_and_every_other_writer() {
        let p = program(&[4242, 77, 1 << 20]);
        for pid in [4242, 77, 1 << 20] {
            assert_eq!(run(&p, &msg(NEWRULE, pid)), 0, "pid {pid}'s rule");
            assert_eq!(run(&p, &msg(NEWGEN, pid)), u32::MAX, "pid {pid}'s NEWGEN");
        }
        for pid in [0, 4243, 78, 42, (1 << 20) + 1, 4242 << 8] {
            assert_eq!(run(&p, &msg(NEWRULE, pid)), u32::MAX, "pid {pid}'s rule");
        }
        // No PID: everything passes; a datagram too short to hold a header is dropped.
        assert_eq!(run(&program(&[]), &msg(NEWRULE, 4242)), u32::MAX);
        assert_eq!(run(&p, &[1, 2, 3]), 0);
    }

    #[test]
    fn every_jump_lands_inside_with_the_most_pids_and_more_are_left_out() {
        let pids: Vec<u32> = (1000..1000 + MAX_PIDS as u32 + 10).collect();
        let p = program(&pids);
        assert_eq!(p.len(), 3 + MAX_PIDS + 2);
        for (at, i) in p.iter().enumerate() {
            if i.code == JEQ_K {
                assert!(at + 1 + (i.jt as usize) < p.len() && at + 1 + (i.jf as usize) < p.len());
            }
        }
        assert_eq!(run(&p, &msg(NEWRULE, 1000 + MAX_PIDS as u32 - 1)), 0);
        assert_eq!(run(&p, &msg(NEWRULE, 1000 + MAX_PIDS as u32)), u32::MAX);
    }
}
