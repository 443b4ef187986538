/* The export macro of libmxmoe: the shared library is built with hidden visibility, and
   only declarations marked MXMOE_API (the public C and C++ API) are exported. */
#ifndef MXMOE_EXPORT_H
#define MXMOE_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define MXMOE_API __attribute__((visibility("default")))
#else
#define MXMOE_API
#endif

#endif /* MXMOE_EXPORT_H */
