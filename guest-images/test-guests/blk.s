# Test guest: virtio-blk read and write.
#
# The host prepares a raw disk whose sector 0 starts with `FERROVIRT-SECTOR` (16 bytes). The
# guest prints, in order:
#   TEST blk capacity <16 hex digits>   (sectors, from the config space)
#   TEST blk readonly                   (only when the device offers VIRTIO_BLK_F_RO)
#   TEST blk id <serial>                (VIRTIO_BLK_T_GET_ID)
#   TEST blk read ok                    (sector 0 carries the magic)
#   TEST blk write status <2 hex>       (VIRTIO_BLK_T_OUT of sector 1)
#   TEST blk write ok                   (status 0 and sector 1 reads back the same)
#   TEST blk flush ok                   (VIRTIO_BLK_T_FLUSH, when negotiated)
#   TEST blk ok                         (all of the above passed on a writable disk)
# Sector 1 is written as `FERROVIRT-GUEST-WROTE-SECTOR-1\n` (31 bytes) followed by bytes whose
# value is their offset in the sector modulo 256 (offsets 31..511).
    .include "common.s"
    .set T_IN, 0
    .set T_OUT, 1
    .set T_FLUSH, 4
    .set T_GET_ID, 8
    .set F_RO, 1 << 5
    .set F_FLUSH, 1 << 9
    .text
main:
    say "ferrovirt test guest: virtio-blk\n"
    movl $2, %edi
    call virtio_find
    testq %rax, %rax
    jnz 1f
    fail "TEST blk FAIL no virtio-blk device found\n"
1:  movq %rax, %rbx
    movl $(F_RO | F_FLUSH), %edi
    call virtio_init
    movl %eax, %r12d                    # accepted features
    xorl %ecx, %ecx
    movl $blkq, %edx
    call virtio_queue
    call virtio_driver_ok

    say "TEST blk capacity "
    movl VM_CONFIG + 4(%rbx), %eax
    shlq $32, %rax
    movl VM_CONFIG(%rbx), %ecx
    orq %rcx, %rax
    movl $16, %ecx
    call puthex
    say "\n"
    testl $F_RO, %r12d
    jz 2f
    say "TEST blk readonly\n"

2:  movl $T_GET_ID, %edi
    movl $idbuf, %edx
    movl $20, %ecx
    movl $VIRTQ_DESC_F_WRITE, %r8d
    call blk_request
    testb %al, %al
    jz 3f
    fail "TEST blk FAIL get-id\n"
3:  say "TEST blk id "
    movl $idbuf, %esi
    call puts
    say "\n"

    movl $T_IN, %edi
    xorl %esi, %esi
    movl $rbuf, %edx
    movl $512, %ecx
    movl $VIRTQ_DESC_F_WRITE, %r8d
    call blk_request
    testb %al, %al
    jz 4f
    fail "TEST blk FAIL read status\n"
4:  movl $rbuf, %esi
    movl $magic, %edi
    movl $16, %ecx
    call memeq
    je 5f
    fail "TEST blk FAIL sector 0 does not start with FERROVIRT-SECTOR\n"
5:  say "TEST blk read ok\n"

    # Fill the write buffer: byte i = i, then the text over the first 31 bytes.
    xorl %ecx, %ecx
6:  movb %cl, wbuf(%rcx)
    incl %ecx
    cmpl $512, %ecx
    jb 6b
    xorl %ecx, %ecx
7:  movb wtext(%rcx), %al
    movb %al, wbuf(%rcx)
    incl %ecx
    cmpl $31, %ecx
    jb 7b

    movl $T_OUT, %edi
    movl $1, %esi
    movl $wbuf, %edx
    movl $512, %ecx
    xorl %r8d, %r8d
    call blk_request
    movl %eax, %r13d
    say "TEST blk write status "
    movzbl %r13b, %eax
    movl $2, %ecx
    call puthex
    say "\n"
    testb %r13b, %r13b
    jz 8f
    ret
8:  movl $T_IN, %edi
    movl $1, %esi
    movl $rbuf, %edx
    movl $512, %ecx
    movl $VIRTQ_DESC_F_WRITE, %r8d
    call blk_request
    testb %al, %al
    jz 9f
    fail "TEST blk FAIL read back status\n"
9:  movl $rbuf, %esi
    movl $wbuf, %edi
    movl $512, %ecx
    call memeq
    je 10f
    fail "TEST blk FAIL sector 1 read back differs\n"
10: say "TEST blk write ok\n"

    testl $F_FLUSH, %r12d
    jz 12f
    movl $T_FLUSH, %edi
    xorl %esi, %esi
    xorl %edx, %edx
    xorl %ecx, %ecx
    xorl %r8d, %r8d
    call blk_request
    testb %al, %al
    jz 11f
    fail "TEST blk FAIL flush status\n"
11: say "TEST blk flush ok\n"
12: say "TEST blk ok\n"
    ret

# blk_request: edi = type, rsi = sector, rdx = data buffer, ecx = data length (0: no data
# descriptor), r8d = data descriptor flags (VIRTQ_DESC_F_WRITE when the device writes it).
# Returns al = status byte (0xfe on timeout). Uses descriptors 0-2.
blk_request:
    movl %edi, blk_hdr
    movl $0, blk_hdr + 4
    movq %rsi, blk_hdr + 8
    movb $0xff, blk_status
    movq %rdx, arg_buf
    movl %ecx, arg_len
    movl %r8d, arg_flags
    movl $blkq, %edx
    xorl %ecx, %ecx
    movl $blk_hdr, %esi
    movl $16, %r8d
    movl $(VIRTQ_DESC_F_NEXT | (1 << 16)), %r9d
    cmpl $0, arg_len
    jne 1f
    movl $(VIRTQ_DESC_F_NEXT | (2 << 16)), %r9d
1:  call vq_desc
    movl $1, %ecx
    movq arg_buf, %rsi
    movl arg_len, %r8d
    movl arg_flags, %r9d
    orl $(VIRTQ_DESC_F_NEXT | (2 << 16)), %r9d
    call vq_desc
    movl $2, %ecx
    movl $blk_status, %esi
    movl $1, %r8d
    movl $VIRTQ_DESC_F_WRITE, %r9d
    call vq_desc
    xorl %eax, %eax
    xorl %ecx, %ecx
    call vq_kick
    call vq_wait
    cmpl $-1, %eax
    jne 2f
    movb $0xfe, %al
    ret
2:  movzbl blk_status, %eax
    ret

    .section .rodata
magic:
    .ascii "FERROVIRT-SECTOR"
wtext:
    .ascii "FERROVIRT-GUEST-WROTE-SECTOR-1\n"

    .bss
    .balign 4096
blkq:
    .skip 4096
blk_hdr:
    .skip 16
blk_status:
    .skip 8
arg_buf:
    .skip 8
arg_len:
    .skip 4
arg_flags:
    .skip 4
idbuf:
    .skip 32
    .balign 512
rbuf:
    .skip 512
wbuf:
    .skip 512
