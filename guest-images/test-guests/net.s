# Test guest: virtio-net send and receive.
#
# Negotiates VIRTIO_F_VERSION_1 and VIRTIO_NET_F_MAC only (so every buffer starts with the
# 12-byte virtio_net_hdr, all zeros here). Prints:
#   TEST net mac <aa:bb:cc:dd:ee:ff>   (from the config space)
#   TEST net tx ok                     (the device used the TX chain)
#   TEST net rx ok                     (a frame arrived with EtherType 0x88b5 and a payload
#                                       starting with `FERROVIRT-NET-RX`)
#   TEST net ok
# The sent frame is a broadcast from the device MAC with EtherType 0x88b5 (local experimental)
# and the payload `FERROVIRT-NET-TX`, padded with zeros to 60 bytes. Received frames of other
# types (IPv6 router solicitations and the like) are skipped, up to 64 of them.
    .include "common.s"
    .set F_MAC, 1 << 5
    .set HDR_LEN, 12
    .set RX_LEN, 1600
    .text
main:
    say "ferrovirt test guest: virtio-net\n"
    movl $1, %edi
    call virtio_find
    testq %rax, %rax
    jnz 1f
    fail "TEST net FAIL no virtio-net device found\n"
1:  movq %rax, %rbx
    movl $F_MAC, %edi
    call virtio_init
    testl $F_MAC, %eax
    jnz 2f
    fail "TEST net FAIL device offers no MAC\n"
2:  xorl %ecx, %ecx
    movl $rxq, %edx
    call virtio_queue
    movl $1, %ecx
    movl $txq, %edx
    call virtio_queue
    call virtio_driver_ok

    # The MAC: print it and put it in the frame's source address.
    say "TEST net mac "
    xorl %r12d, %r12d
3:  movb VM_CONFIG(%rbx,%r12), %al
    movb %al, txbuf + HDR_LEN + 6(%r12)
    movzbl %al, %eax
    movl $2, %ecx
    call puthex
    incl %r12d
    cmpl $6, %r12d
    je 4f
    movb $':', %al
    call putc
    jmp 3b
4:  say "\n"

    call post_rx

    # TX: header + frame in one descriptor.
    movl $txq, %edx
    xorl %ecx, %ecx
    movl $txbuf, %esi
    movl $(HDR_LEN + 60), %r8d
    xorl %r9d, %r9d
    call vq_desc
    xorl %eax, %eax
    movl $1, %ecx
    call vq_kick
    call vq_wait
    cmpl $-1, %eax
    jne 5f
    fail "TEST net FAIL tx timeout\n"
5:  say "TEST net tx ok\n"

    movl $64, %r12d
6:  movl $rxq, %edx
    call vq_wait
    cmpl $-1, %eax
    jne 7f
    fail "TEST net FAIL rx timeout\n"
7:  cmpl $(HDR_LEN + 14 + 16), %eax
    jb 8f
    cmpw $0xb588, rxbuf + HDR_LEN + 12
    jne 8f
    movl $rxbuf + HDR_LEN + 14, %esi
    movl $rxmagic, %edi
    movl $16, %ecx
    call memeq
    je 9f
8:  call post_rx
    decl %r12d
    jnz 6b
    fail "TEST net FAIL no frame of type 0x88b5 received\n"
9:  say "TEST net rx ok\n"
    say "TEST net ok\n"
    ret

# post_rx: offers rxbuf (device-writable) as descriptor 0 of the RX queue.
post_rx:
    movl $rxq, %edx
    xorl %ecx, %ecx
    movl $rxbuf, %esi
    movl $RX_LEN, %r8d
    movl $VIRTQ_DESC_F_WRITE, %r9d
    call vq_desc
    xorl %eax, %eax
    xorl %ecx, %ecx
    call vq_kick
    ret

    .section .rodata
rxmagic:
    .ascii "FERROVIRT-NET-RX"

    .data
    .balign 16
txbuf:
    .fill HDR_LEN, 1, 0
    .byte 0xff, 0xff, 0xff, 0xff, 0xff, 0xff
    .fill 6, 1, 0
    .byte 0x88, 0xb5
    .ascii "FERROVIRT-NET-TX"
    .fill 60 - 14 - 16, 1, 0

    .bss
    .balign 4096
rxq:
    .skip 4096
txq:
    .skip 4096
rxbuf:
    .skip RX_LEN
